"""Control flow: If, Loop and Scan, whose bodies are graphs compiled into plans of their own.

A body is traced on Placeholders (its inputs, and the outer values it reads: those are passed
in as inputs of the control-flow op), scheduled and memory-planned like any graph, and held
by the op as a :class:`Body`. The op's kernel binds the body's plan into the op's declared
workspace: the body's arena, its loop-carried state (double-buffered: iteration ``i`` reads
one copy and writes the other, so carrying a value costs no copy) and the per-iteration
inputs and outputs all lie in the parent plan's arena, so ``memory_report()`` of the parent
counts every byte the bodies use, and the arenas of If's two branches share bytes.

Shapes are static within a plan: carried values keep their shape from one iteration to the
next, and the stacked scan outputs of a Loop need a trip count known when the graph is built
(a Scan's length is its input's). Gradients through control flow are not supported.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir.op import Operation
from ..ir.tensor import Tensor, TensorSpec


@dataclass
class Body:
    """A subgraph planned on its own: ``graph`` (its inputs are Placeholders), its
    ``memory`` plan (a :class:`~singa_graph.passes.memory.MemoryPlan`), the Placeholders
    in order (``inputs``: the body's own inputs, then the outer values it reads) and the
    ``outputs`` (each one a fresh buffer, never an input or another output)."""

    graph: object
    memory: object
    inputs: list
    outputs: list
    name: str = "body"

    @property
    def arena_bytes(self) -> int:
        return int(self.memory.arena_bytes)

    def specs(self, tensors) -> list[tuple[tuple, np.dtype]]:
        return [(tuple(t.shape), np.dtype(t.dtype)) for t in tensors]

    def __repr__(self):
        return (f"Body({self.name!r}, {len(self.graph.nodes)} nodes, arena "
                f"{self.arena_bytes} B)")


class _ControlFlow(Operation):
    """Shared by If, Loop and Scan: no gradient, clear refusal."""

    def gradient(self, inputs, outputs, dys, needs):
        raise UnsupportedOpError(f"{self.type}: gradients through control flow are not "
                                 "supported (If, Loop and Scan run in inference plans)")

    def attributes(self) -> dict:
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "name"}


def _same(what, got, want):
    if tuple(got.shape) != tuple(want[0]) or np.dtype(got.dtype) != want[1]:
        raise ShapeError(f"{what} is {got.shape} {got.dtype}, the body takes "
                         f"{want[0]} {want[1]}")


class Loop(_ControlFlow):
    """ONNX Loop. Inputs: the trip count M (int64 scalar) when ``has_trip``, the initial
    condition (bool scalar) when ``has_cond``, the ``n_carried`` initial carried values,
    then the outer values the body reads. Outputs: the final carried values, then the
    ``n_scan`` scan outputs stacked over ``trip`` iterations (known when built).

    The body takes ``(iteration, condition, *carried, *outer)`` and returns
    ``(condition, *carried, *scan elements)``."""

    def __init__(self, body: Body, has_trip: bool, has_cond: bool, n_carried: int,
                 n_scan: int, trip: int | None = None):
        self.body, self.has_trip, self.has_cond = body, bool(has_trip), bool(has_cond)
        self.n_carried, self.n_scan, self.trip = int(n_carried), int(n_scan), trip
        if n_scan and trip is None:
            raise UnsupportedOpError("Loop: scan outputs need a trip count known when the "
                                     "graph is built")

    @property
    def first_carried(self) -> int:
        return int(self.has_trip) + int(self.has_cond)

    def infer(self, *inputs):
        k0, k = self.first_carried, self.n_carried
        want = self.body.specs(self.body.inputs)
        for j, x in enumerate(inputs[k0:]):
            _same(f"input {k0 + j}", x, want[2 + j])
        outs = [TensorSpec(x.shape, x.dtype) for x in inputs[k0:k0 + k]]
        for t in self.body.outputs[1 + k:]:
            outs.append(TensorSpec((self.trip,) + tuple(t.shape), t.dtype))
        return outs


class Scan(_ControlFlow):
    """ONNX Scan (opset 9 on). Inputs: ``n_state`` initial states, ``n_scan_in`` scanned
    inputs, then the outer values the body reads. Outputs: final states, then the scan
    outputs, ``length`` elements each along ``out_axes``. ``in_reverse``/``out_reverse``
    say which scanned inputs are read and which outputs are written last to first."""

    def __init__(self, body: Body, n_state: int, n_scan_in: int, length: int,
                 in_axes=(), in_reverse=(), out_axes=(), out_reverse=()):
        self.body, self.n_state, self.n_scan_in = body, int(n_state), int(n_scan_in)
        self.length = int(length)
        n_out = len(body.outputs) - self.n_state
        self.in_axes = tuple(in_axes) or (0,) * self.n_scan_in
        self.in_reverse = tuple(map(bool, in_reverse)) or (False,) * self.n_scan_in
        self.out_axes = tuple(out_axes) or (0,) * n_out
        self.out_reverse = tuple(map(bool, out_reverse)) or (False,) * n_out

    def infer(self, *inputs):
        s, m = self.n_state, self.n_scan_in
        want = self.body.specs(self.body.inputs)
        for j, x in enumerate(inputs[:s]):
            _same(f"state {j}", x, want[j])
        for j, (x, ax) in enumerate(zip(inputs[s:s + m], self.in_axes)):
            if x.shape[ax] != self.length:
                raise ShapeError(f"scan input {j} has {x.shape[ax]} elements along axis "
                                 f"{ax}, the others {self.length}")
            _same(f"an element of scan input {j}", TensorSpec(
                x.shape[:ax] + x.shape[ax + 1:], x.dtype), want[s + j])
        for j, x in enumerate(inputs[s + m:]):
            _same(f"outer value {j}", x, want[s + m + j])
        outs = [TensorSpec(x.shape, x.dtype) for x in inputs[:s]]
        for t, ax in zip(self.body.outputs[s:], self.out_axes):
            shape = tuple(t.shape)
            outs.append(TensorSpec(shape[:ax] + (self.length,) + shape[ax:], t.dtype))
        return outs


class If(_ControlFlow):
    """ONNX If whose condition is computed at run time. Inputs: the condition (a bool
    scalar), the outer values the then-branch reads (``n_then``), then those the else-branch
    reads. Both branches return outputs of the same shapes and dtypes, written straight into
    the op's outputs; their arenas share the op's workspace (only one runs)."""

    def __init__(self, then_body: Body, else_body: Body, n_then: int):
        self.then_body, self.else_body, self.n_then = then_body, else_body, int(n_then)
        a, b = then_body.specs(then_body.outputs), else_body.specs(else_body.outputs)
        if a != b:
            raise UnsupportedOpError(f"If: the branches return {a} and {b}; a plan needs one "
                                     "shape and dtype per output whatever the condition")

    def infer(self, cond, *outer):
        if cond.size != 1:
            raise ShapeError(f"the condition has shape {cond.shape}, expected one element")
        return [TensorSpec(t.shape, t.dtype) for t in self.then_body.outputs]


def is_symbolic(x) -> bool:
    """True for a Tensor whose value is computed by a graph (not a constant)."""
    return isinstance(x, Tensor) and (x.data is None or x.creator is not None)
