"""Resize and AxisMatmul: one batched matrix product per resized axis (numpy's matmul over the axes
before it), through planned workspace: the weights in the data's dtype, the intermediate
stages, and float32 staging of float16 data."""
from __future__ import annotations

import numpy as np

from ...registry import carve, carved_bytes, kernel


def _specs(op, ins, outs):
    x = ins[0]
    # a fixed linear map (DFT) sums many terms that cancel: float64 keeps its zeros zero
    c = np.float64 if x.dtype == np.float64 or op.type == "AxisMatmul" else np.float32
    specs = [(w.shape, c) for w in op.weights]
    specs += [(s, c) for s in op.stage_shapes(x.shape)]  # the last used only for float16
    specs.append((tuple(x.shape), c))  # float16 input staged
    return specs


def _workspace(op, ins, outs):
    return carved_bytes(*_specs(op, ins, outs))


def _as3(a, axis):
    pre = int(np.prod(a.shape[:axis], dtype=np.int64))
    return a.reshape(pre, a.shape[axis], -1)


@kernel("AxisMatmul", workspace=_workspace)
@kernel("Resize", workspace=_workspace)
def resize(op, ins, outs, ws):
    (x,), (y,) = ins, outs
    parts = carve(ws, *_specs(op, ins, outs))
    k = len(op.weights)
    ws_w, stages, staged = parts[:k], parts[k:2 * k], parts[2 * k]
    c = staged.dtype
    src = x if x.dtype == c else staged
    if y.dtype == c:
        stages[-1] = y
    plan, cur = [], src
    for a, w, m, dst in zip(op.axes, ws_w, op.outside, stages):
        mask = None if m is None else m.reshape((1, -1, 1))
        plan.append((w, _as3(cur, a), _as3(dst, a), mask))
        cur = dst
    fill = c.type(op.fill)

    def step():
        if src is not x:
            np.copyto(src, x, casting="unsafe")
        for (w, a3, b3, mask), w64 in zip(plan, op.weights):
            np.copyto(w, w64, casting="unsafe")
            np.matmul(w, a3, out=b3)
            if mask is not None:
                np.copyto(b3, fill, where=mask)
        if cur is not y:
            np.copyto(y, cur, casting="unsafe")
    return step
