"""ONNX -> singa_graph: If, Loop and Scan.

A body (a GraphProto in the node's attributes) is a :class:`Subprogram`: a Program whose
extra inputs are the outer names it reads, traced by the same :meth:`Program.trace`. Traced on
Placeholders, it becomes a graph of its own planned by
:func:`~singa_graph.passes.compile.plan_graph`; the outer values it reads that the parent
computes (and the trainable parameters it reads) become inputs of the control-flow op (see
:mod:`singa_graph.ops.control`). Where a body can
be given a static meaning only by knowing its values while building, it is traced inline
instead: an If whose condition is known (or whose branches return sequences, optionals or
shapes that differ), a Loop whose body needs the iteration number as a shape or index (a
Slice bound), or whose carried values change shape or are sequences, when its trip count
is known (unrolled, at most :data:`MAX_UNROLL` iterations).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .. import ops
from ..errors import GraphError, UnsupportedOpError
from ..ir.graph import Graph
from ..ir.op import building
from ..ir.tensor import Placeholder, Tensor
from ..ops.control import Body, If, Loop, Scan, is_symbolic
from .program import NeedsValue, Program, constant, subgraphs
from .registry import importer

MAX_UNROLL = 4096  # a longer loop that needs unrolling is refused


class _Unroll(Exception):
    """The body cannot be planned with static shapes; trace it inline when possible."""


def free_names(g) -> list[str]:
    """The outer-scope names body ``g`` reads (nested bodies included), in first-use order."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    out: list[str] = []
    for node in g.node:
        reads = [x for x in node.input if x]
        for sub in subgraphs(node):
            reads += free_names(sub)
        for x in reads:
            if x not in defined and x not in out:
                out.append(x)
        defined.update(o for o in node.output if o)
    out += [o.name for o in g.output if o.name not in defined and o.name not in out]
    return out


class Subprogram:
    """Body ``g`` of node ``n`` as a :class:`Program` of its own, whose extra inputs are
    the outer names it reads; traced once (a plan) or once per iteration (unrolled)."""

    def __init__(self, n, g):
        self.n, self.g = n, g
        self.outer = free_names(g)
        graph = onnx.GraphProto()
        graph.CopyFrom(g)
        graph.input.extend(helper.make_empty_tensor_value_info(x) for x in self.outer)
        model = helper.make_model(graph, opset_imports=n._program.model.opset_import)
        self.program = Program(model)
        self.own = {i.name for i in g.input} | {o for x in g.node for o in x.output}

    def outer_value(self, name):
        """What the parent's scope holds under ``name`` (float initialisers: Parameters)."""
        n = self.n
        if name in n._env:
            return n._env[name]
        arr = n._program.initializers.get(name)
        if arr is None:
            raise GraphError(f"the body of node {n.name!r} reads {name!r}, which nothing "
                             "produces")
        return n._store.parameter(name, arr) if arr.dtype.kind == "f" else arr

    def trace(self, values, outer, planned: bool = False) -> list:
        """The body's outputs for its inputs ``values`` and outer names ``outer``. When
        ``planned`` (inputs are Placeholders), a value of the body needed while building
        raises :class:`_Unroll`; an outer one, or any when inlined, raises NeedsValue (a
        caller that can, the ONNX backend, builds again with more values known)."""
        feeds = dict(zip([i.name for i in self.g.input], values))
        feeds.update(outer)
        try:
            return self.program.trace(feeds, self.n._store, training=self.n.training)
        except NeedsValue as e:
            if planned and e.value_name in self.own:
                raise _Unroll(str(e)) from None
            raise


def _device(values):
    from ..runtime.device import get_default_device

    for v in values:
        if isinstance(v, Tensor):
            return v.device
    return get_default_device()


def inline(n, g, values, body=None) -> list:
    """Trace body ``g`` into the current graph with its inputs set to ``values``; returns
    its outputs (Tensors, numpy arrays, sequences)."""
    body = body or Subprogram(n, g)
    return body.trace(values, {x: body.outer_value(x) for x in body.outer})


def plan_body(n, g, specs, device, label: str) -> tuple[Body, list]:
    """Trace body ``g`` on Placeholders of ``specs`` (``(shape, dtype)`` per input) and plan
    it; returns the Body and the outer values it reads (the op's extra inputs)."""
    from ..passes.compile import plan_graph

    if device.kind != "cpu":
        raise UnsupportedOpError(f"{n.op_type} node {n.name!r}: control flow runs on the CPU "
                                 f"only, not on {device}")
    body = Subprogram(n, g)
    phs = [Placeholder(shape, dtype, device=device, name=f"{label}/{inp.name}")
           for inp, (shape, dtype) in zip(g.input, specs)]
    outer, captured = {}, []
    for x in body.outer:
        v = body.outer_value(x)
        if is_symbolic(v):  # computed by the parent's graph: passed in
            ph = Placeholder(v.shape, v.dtype, device=device, name=f"{label}/{x}")
            captured.append((v, ph))
            v = ph
        outer[x] = v
    results = body.trace(phs, outer, planned=True)
    outs, seen = [], set()
    for o, v in zip(g.output, results):
        if not isinstance(v, (Tensor, np.ndarray, np.generic)):
            raise _Unroll(f"output {o.name!r} is a sequence or optional")
        t = constant(v, o.name) if not isinstance(v, Tensor) else v
        # every output its own fresh buffer: the kernel binds outputs and inputs apart
        if t.creator is None or t.creator.op.alias or id(t) in seen:
            with building():  # a node even for a constant
                t = ops.identity(t)
        seen.add(id(t))
        outs.append(t)
    with_outer = phs + [ph for _, ph in captured]
    graph = Graph(outs, inputs=with_outer, name=label)
    # trainable parameters the body reads are inputs of the op too (bound to the same
    # arrays): autodiff then meets the op, whose gradient refuses clearly, instead of
    # missing the parameters' dependence on the body
    params = [t for t in graph.leaves() if t.requires_grad]
    graph.inputs = with_outer = with_outer + params
    memory, _ = plan_graph(graph, device=device)
    return Body(graph, memory, with_outer, outs, label), [v for v, _ in captured] + params


def _spec(v):
    return tuple(v.shape), np.dtype(v.dtype)


def _tensor(v, name=None):
    return v if isinstance(v, Tensor) else constant(v, name)


# ---------------------------------------------------------------------- If
@importer("If")
def if_(n):
    then_g, else_g = n.attr("then_branch"), n.attr("else_branch")
    if n.is_const(0):
        return inline(n, then_g if bool(np.asarray(n.const(0)).reshape(-1)[0]) else else_g, [])
    cond = n.t(0)
    device = _device([cond])
    try:
        then_b, then_outer = plan_body(n, then_g, [], device, f"{n.name}/then")
        else_b, else_outer = plan_body(n, else_g, [], device, f"{n.name}/else")
        if then_b.specs(then_b.outputs) != else_b.specs(else_b.outputs):
            raise _Unroll("the branches return different shapes")
    except _Unroll:
        n.const(0)  # raises NeedsValue: the condition decides the outputs' types
        raise
    if cond.dtype != np.bool_:
        cond = ops.cast(cond, np.bool_)
    return If(then_b, else_b, len(then_outer))(cond, *then_outer, *else_outer)


# ---------------------------------------------------------------------- Loop
def _always_true(t, cond_ph) -> bool:
    """True when the body's output condition is its input condition passed through (or a
    constant true): the loop then runs exactly its trip count."""
    while isinstance(t, Tensor) and t.creator is not None and t.creator.op.type == "Identity":
        t = t.creator.inputs[0]
    if t is cond_ph:
        return True
    return isinstance(t, Tensor) and t.creator is None and t.data is not None and \
        bool(np.all(t.data))


@importer("Loop")
def loop(n):
    g = n.attr("body")
    has_trip, has_cond = n.has(0), n.has(1)
    trip = int(n.const(0)) if has_trip and n.is_const(0) else None
    cond0 = bool(np.asarray(n.const(1)).reshape(-1)[0]) if has_cond and n.is_const(1) else None
    init = [n._raw(i) for i in range(2, n.n_inputs)]
    k = len(init)
    n_scan = len(g.output) - 1 - k
    if cond0 is False or trip == 0:
        if n_scan:
            n.fail("scan outputs of a loop that runs no iteration")
        return [_tensor(v) if isinstance(v, np.ndarray) else v for v in init]
    try:
        if not all(isinstance(v, (Tensor, np.ndarray)) for v in init):
            raise _Unroll("it carries sequences or optionals")
        init = [_tensor(v) for v in init]
        device = _device(init)
        specs = [((), np.dtype(np.int64)), ((), np.dtype(np.bool_))] + [_spec(v) for v in init]
        body, outer = plan_body(n, g, specs, device, f"{n.name}/body")
        if [_spec(t) for t in body.outputs[1:1 + k]] != specs[2:]:
            raise _Unroll("its carried values change shape")
        if n_scan:
            if trip is None:
                n.const(0)  # raises NeedsValue: the scan outputs' length is the trip count
            if has_cond and cond0 is None:
                n.const(1)  # raises NeedsValue: the condition may stop the loop at once
            if not _always_true(body.outputs[0], body.inputs[1]):
                raise UnsupportedOpError(
                    f"Loop node {n.name!r}: its scan outputs have a length decided by a "
                    "condition computed at run time, which a static plan cannot hold")
    except _Unroll as why:
        return _unroll(n, g, trip, cond0, has_cond, k, n_scan, why)
    ins = ([n.t(0)] if has_trip else []) + ([_bool(n.t(1))] if has_cond else [])
    if has_trip and ins[0].dtype != np.int64:
        ins[0] = ops.cast(ins[0], np.int64)
    return Loop(body, has_trip, has_cond, k, n_scan, trip)(*ins, *init, *outer)


def _bool(t):
    return t if t.dtype == np.bool_ else ops.cast(t, np.bool_)


def _unroll(n, g, trip, cond0, has_cond, k, n_scan, why):
    if trip is None and n.has(0):
        n.const(0)  # raises NeedsValue when the trip count is an input
    if has_cond and cond0 is None:
        n.const(1)  # the same for the initial condition
    if trip is None or trip > MAX_UNROLL or (has_cond and cond0 is None):
        raise UnsupportedOpError(
            f"Loop node {n.name!r}: the body cannot be planned with static shapes ({why}) "
            f"and the loop cannot be unrolled (it needs a trip count known when building, "
            f"at most {MAX_UNROLL}, and a known initial condition)")
    carried = [n._raw(i) for i in range(2, n.n_inputs)]
    scans: list[list] = [[] for _ in range(n_scan)]
    body = Subprogram(n, g)
    for i in range(trip):
        outs = inline(n, g, [np.array(i, np.int64), np.array(True), *carried], body)
        cond, carried = outs[0], outs[1:1 + k]
        for lst, v in zip(scans, outs[1 + k:]):
            lst.append(v)
        if is_symbolic(cond):
            raise UnsupportedOpError(f"Loop node {n.name!r}: unrolled, but its condition "
                                     "is computed at run time")
        if not bool(np.asarray(cond.data if isinstance(cond, Tensor) else cond)):
            break
    stacked = []
    for lst in scans:
        if all(isinstance(v, np.ndarray) for v in lst):
            stacked.append(np.stack(lst))
        else:
            stacked.append(ops.cat([ops.unsqueeze(_tensor(v), [0]) for v in lst], 0))
    return carried + stacked


# ---------------------------------------------------------------------- Scan
def _scan_op(n, g, states, xs, in_axes, in_rev, out_axes, out_rev, label):
    m = len(xs)
    length = xs[0].shape[in_axes[0]]
    specs = [_spec(v) for v in states] + [
        (tuple(x.shape[:a] + x.shape[a + 1:]), np.dtype(x.dtype)) for x, a in zip(xs, in_axes)]
    device = _device(states + xs)
    try:
        body, outer = plan_body(n, g, specs, device, label)
    except _Unroll as why:
        n.fail(f"a body that cannot be planned with static shapes ({why})")
    s = len(states)
    if [_spec(t) for t in body.outputs[:s]] != specs[:s]:
        n.fail("states that change shape from one iteration to the next")
    n_out = len(body.outputs) - s
    out_axes = [a % (len(body.outputs[s + j].shape) + 1) for j, a in
                enumerate(out_axes or [0] * n_out)]
    return Scan(body, s, m, length, in_axes, in_rev, out_axes, out_rev)(*states, *xs, *outer)


@importer("Scan", since=9)
def scan_9(n):
    g = n.attr("body")
    m = int(n.attr("num_scan_inputs"))
    vals = [_tensor(n._raw(i)) for i in range(n.n_inputs)]
    states, xs = vals[:len(vals) - m], vals[len(vals) - m:]
    in_axes = [a % len(x.shape) for a, x in zip(n.attr("scan_input_axes") or [0] * m, xs)]
    out = _scan_op(n, g, states, xs, in_axes, n.attr("scan_input_directions") or [],
                   n.attr("scan_output_axes") or [], n.attr("scan_output_directions") or [],
                   f"{n.name}/body")
    return list(out) if isinstance(out, tuple) else [out]


@importer("Scan", since=8)
def scan_8(n):
    """Opset 8's Scan has a batch axis first: one Scan per batch row, stacked."""
    g = n.attr("body")
    m = int(n.attr("num_scan_inputs"))
    if n.has(0):
        n.fail("sequence_lens")
    vals = [_tensor(n._raw(i)) for i in range(1, n.n_inputs)]
    states, xs = vals[:len(vals) - m], vals[len(vals) - m:]
    rev = n.attr("directions") or []
    batch = (states + xs)[0].shape[0]
    rows = []
    for b in range(batch):
        pick = [ops.squeeze(ops.slice(v, [b], [b + 1], [0]), [0]) for v in states + xs]
        out = _scan_op(n, g, pick[:len(states)], pick[len(states):], [0] * m, rev, [], [],
                       f"{n.name}/body{b}")
        rows.append(list(out) if isinstance(out, tuple) else [out])
    return [ops.cat([ops.unsqueeze(r[j], [0]) for r in rows], 0) for j in range(len(rows[0]))]
