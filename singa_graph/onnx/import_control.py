"""ONNX -> singa_graph: If, Loop and Scan.

A body (a GraphProto in the node's attributes) is traced on Placeholders into a graph of its
own and planned by :func:`~singa_graph.passes.compile.plan_graph`; the outer values it reads
become inputs of the control-flow op (see :mod:`singa_graph.ops.control`). Where a body can
be given a static meaning only by knowing its values while building, it is traced inline
instead: an If whose condition is known (or whose branches return sequences, optionals or
shapes that differ), a Loop whose body needs the iteration number as a shape or index (a
Slice bound), or whose carried values change shape or are sequences, when its trip count
is known (unrolled, at most :data:`MAX_UNROLL` iterations).
"""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from .. import ops
from ..errors import UnsupportedOpError
from ..ir.graph import Graph
from ..ir.op import building
from ..ir.tensor import Placeholder, Tensor
from ..ops.control import Body, If, Loop, Scan, is_symbolic
from .program import NeedsValue, constant
from .registry import importer

MAX_UNROLL = 4096  # a longer loop that needs unrolling is refused


class Scope(dict):
    """The names a body sees: its own, then its parent's (outer-scope values). With
    ``capture``, an outer value computed by the parent's graph is replaced by a Placeholder
    of the body, recorded in ``captured`` as ``(outer value, placeholder)``."""

    def __init__(self, parent, capture: bool = False, prefix: str = ""):
        super().__init__()
        self.parent, self.capture, self.prefix = parent, capture, prefix
        self.captured: list[tuple] = []

    def __contains__(self, name):
        return dict.__contains__(self, name) or name in self.parent

    def __getitem__(self, name):
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        v = self.parent[name]
        if self.capture and is_symbolic(v):
            ph = Placeholder(v.shape, v.dtype, device=v.device, name=name)
            self.captured.append((v, ph))
            dict.__setitem__(self, name, ph)
            return ph
        return v

    def get(self, name, default=None):
        return self[name] if name in self else default


class _Unroll(Exception):
    """The body cannot be planned with static shapes; trace it inline when possible."""


def _body_env(n, g, capture: bool) -> Scope:
    env = Scope(n._env, capture=capture)
    for t in g.initializer:
        dict.__setitem__(env, t.name, numpy_helper.to_array(t))
    return env


def _device(values):
    from ..runtime.device import get_default_device

    for v in values:
        if isinstance(v, Tensor):
            return v.device
    return get_default_device()


def inline(n, g, values) -> list:
    """Trace body ``g`` into the current graph with its inputs set to ``values``; returns
    its outputs (Tensors, numpy arrays, sequences)."""
    env = _body_env(n, g, capture=False)
    for inp, v in zip(g.input, values):
        dict.__setitem__(env, inp.name, v)
    n._program.run_nodes(list(g.node), env, n._store, n.training)
    return [env[o.name] for o in g.output]


def plan_body(n, g, specs, device, label: str) -> tuple[Body, list]:
    """Trace body ``g`` on Placeholders of ``specs`` (``(shape, dtype)`` per input) and plan
    it; returns the Body and the outer values it reads (the op's extra inputs)."""
    from ..passes.compile import plan_graph

    if device.kind != "cpu":
        raise UnsupportedOpError(f"{n.op_type} node {n.name!r}: control flow runs on the CPU "
                                 f"only, not on {device}")
    env = _body_env(n, g, capture=True)
    phs = []
    for inp, (shape, dtype) in zip(g.input, specs):
        ph = Placeholder(shape, dtype, device=device, name=f"{label}/{inp.name}")
        dict.__setitem__(env, inp.name, ph)
        phs.append(ph)
    own = {inp.name for inp in g.input} | {o for x in g.node for o in x.output}
    try:
        n._program.run_nodes(list(g.node), env, n._store, n.training)
    except NeedsValue as e:
        if e.value_name in own or e.value_name not in n._env:
            raise _Unroll(str(e)) from None  # it needs one of its own run-time values
        raise  # an outer value: the caller may know it when building
    outs, seen = [], set()
    for o in g.output:
        v = env[o.name]
        if not isinstance(v, (Tensor, np.ndarray, np.generic)):
            raise _Unroll(f"output {o.name!r} is a sequence or optional")
        t = constant(v, o.name) if not isinstance(v, Tensor) else v
        # every output its own fresh buffer: the kernel binds outputs and inputs apart
        if t.creator is None or t.creator.op.alias or id(t) in seen:
            with building():  # a node even for a constant
                t = ops.identity(t)
        seen.add(id(t))
        outs.append(t)
    with_outer = phs + [ph for _, ph in env.captured]
    outer = [v for v, _ in env.captured]
    graph = Graph(outs, inputs=with_outer, name=label)
    # trainable parameters the body reads are inputs of the op too (bound to the same
    # arrays): autodiff then meets the op, whose gradient refuses clearly, instead of
    # missing the parameters' dependence on the body
    params = [t for t in graph.leaves() if t.requires_grad]
    graph.inputs = with_outer = with_outer + params
    memory, _ = plan_graph(graph, device=device)
    return Body(graph, memory, with_outer, outs, label), outer + params


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
    for i in range(trip):
        outs = inline(n, g, [np.array(i, np.int64), np.array(True), *carried])
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
