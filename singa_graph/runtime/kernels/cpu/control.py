"""Kernels of ops/control.py: If, Loop and Scan run the plans of their bodies.

Each kernel declares, as its workspace, everything its body plans use beyond the outer
values they read: the body's arena, the body's own inputs and outputs, and for carried
values a second copy (double buffering: even iterations read copy A and write copy B, odd
ones the other way round, through two plans bound over the same arena). So the parent's
memory plan places all of it, ``memory_report()`` counts it, and no byte is allocated when
a body is bound or run. Outer values are bound to the op's input arrays directly.
"""
from __future__ import annotations

import numpy as np

from ....errors import GraphError
from ...plan import ExecutionPlan
from ...registry import carve, carved_bytes, kernel

_U8 = np.dtype(np.uint8)


def _bind(body, arena, arrays, device) -> ExecutionPlan:
    """The plan of ``body`` over ``arena`` with its inputs and outputs bound to
    ``arrays`` (one per ``body.inputs + body.outputs``)."""
    tensors = body.inputs + body.outputs
    preset = {id(t): a for t, a in zip(tensors, arrays)}
    for t, a in zip(tensors, arrays):
        if not a.flags.c_contiguous:
            raise GraphError(f"{body.name}: {t.name} is bound to a strided view")
    return ExecutionPlan(body.graph, body.memory, fetches=body.outputs, device=device,
                         arena=arena, preset=preset)


def _or_empty(ws):
    return np.empty(0, _U8) if ws is None else ws  # a body that needs no bytes


def _device():
    from ...device import create_cpu_device

    return create_cpu_device()


# ---------------------------------------------------------------------- Loop
def _loop_specs(op):
    b = op.body
    k = op.n_carried
    ins, outs = b.specs(b.inputs), b.specs(b.outputs)
    carried = ins[2:2 + k]
    # arena, iteration, condition in, carried A, carried B, condition out, scan elements
    return [((b.arena_bytes,), _U8), ins[0], ins[1], *carried, *carried, outs[0],
            *outs[1 + k:]]


def _loop_ws(op, ins, outs):
    return carved_bytes(*_loop_specs(op))


@kernel("Loop", workspace=_loop_ws)
def loop(op, ins, outs, ws):
    b, k = op.body, op.n_carried
    parts = carve(_or_empty(ws), *_loop_specs(op))
    arena, it, cond_in = parts[0], parts[1], parts[2]
    a, bb = parts[3:3 + k], parts[3 + k:3 + 2 * k]
    cond_out, scan_el = parts[3 + 2 * k], parts[4 + 2 * k:]
    k0 = op.first_carried
    init, outer = ins[k0:k0 + k], list(ins[k0 + k:])
    device = _device()
    plans = [_bind(b, arena, [it, cond_in, *src, *outer, cond_out, *dst, *scan_el], device)
             for src, dst in ((a, bb), (bb, a))]
    finals, scans = outs[:k], outs[k:]
    has_trip, has_cond, trip = op.has_trip, op.has_cond, op.trip
    m_in = ins[0] if has_trip else None
    c_in = ins[int(has_trip)] if has_cond else None
    steps = [p.run_bound for p in plans]

    def run():
        for dst, src in zip(a, init):
            np.copyto(dst, src)
        m = int(m_in) if has_trip else None
        cond = bool(c_in) if has_cond else True
        i = 0
        while cond and (m is None or i < m):
            it[()] = i
            cond_in[()] = cond
            steps[i & 1]()
            cond = bool(cond_out)
            if scans:
                if i >= trip:
                    raise GraphError(f"Loop ran past the {trip} iterations its scan outputs "
                                     "were planned for")
                for y, e in zip(scans, scan_el):
                    y[i] = e
            i += 1
        if scans and i != trip:
            raise GraphError(f"Loop stopped after {i} iterations; its scan outputs were "
                             f"planned for {trip}")
        for y, x0, x1 in zip(finals, a, bb):
            np.copyto(y, x1 if i & 1 else x0)

    return run


# ---------------------------------------------------------------------- Scan
def _scan_specs(op):
    b = op.body
    s, m = op.n_state, op.n_scan_in
    ins, outs = b.specs(b.inputs), b.specs(b.outputs)
    # arena, states A, states B, scanned elements in, scan elements out
    return [((b.arena_bytes,), _U8), *ins[:s], *ins[:s], *ins[s:s + m], *outs[s:]]


def _scan_ws(op, ins, outs):
    return carved_bytes(*_scan_specs(op))


def _at(x, axis, i):
    """Element ``i`` of ``x`` along ``axis``, as a view (an array even when 0-d)."""
    return np.squeeze(x[(slice(None),) * axis + (slice(i, i + 1),)], axis=axis)


@kernel("Scan", workspace=_scan_ws)
def scan(op, ins, outs, ws):
    b, s, m, n = op.body, op.n_state, op.n_scan_in, op.length
    parts = carve(_or_empty(ws), *_scan_specs(op))
    arena, a, bb = parts[0], parts[1:1 + s], parts[1 + s:1 + 2 * s]
    el_in, el_out = parts[1 + 2 * s:1 + 2 * s + m], parts[1 + 2 * s + m:]
    init, xs, outer = ins[:s], ins[s:s + m], list(ins[s + m:])
    device = _device()
    plans = [_bind(b, arena, [*src, *el_in, *outer, *dst, *el_out], device)
             for src, dst in ((a, bb), (bb, a))]
    steps = [p.run_bound for p in plans]
    # per iteration: (element view of each scanned input, slot view of each output)
    reads = [[_at(x, ax, n - 1 - i if rev else i) for x, ax, rev in
              zip(xs, op.in_axes, op.in_reverse)] for i in range(n)]
    writes = [[_at(y, ax, n - 1 - i if rev else i) for y, ax, rev in
               zip(outs[s:], op.out_axes, op.out_reverse)] for i in range(n)]
    finals = outs[:s]

    def run():
        for dst, src in zip(a, init):
            np.copyto(dst, src)
        for i in range(n):
            for dst, src in zip(el_in, reads[i]):
                np.copyto(dst, src)
            steps[i & 1]()
            for dst, src in zip(writes[i], el_out):
                np.copyto(dst, src)
        for y, x0, x1 in zip(finals, a, bb):
            np.copyto(y, x1 if n & 1 else x0)

    return run


# ---------------------------------------------------------------------- If
def _if_ws(op, ins, outs):
    # the branches' arenas share bytes: only one of them runs
    return carved_bytes(((max(op.then_body.arena_bytes, op.else_body.arena_bytes),), _U8))


@kernel("If", workspace=_if_ws)
def if_(op, ins, outs, ws):
    size = max(op.then_body.arena_bytes, op.else_body.arena_bytes)
    arena = carve(_or_empty(ws), ((size,), _U8))[0]
    cond, outer = ins[0], list(ins[1:])
    device = _device()
    then_plan = _bind(op.then_body, arena, [*outer[:op.n_then], *outs], device)
    else_plan = _bind(op.else_body, arena, [*outer[op.n_then:], *outs], device)
    run_then, run_else = then_plan.run_bound, else_plan.run_bound

    def run():
        (run_then if cond.reshape(-1)[0] else run_else)()

    return run
