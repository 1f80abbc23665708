"""Kernel cases: LayerNorm and scaled dot-product attention, forward and backward
(runtime/kernels/cuda/attention.py), in both layouts, with boolean and additive masks."""
import numpy as np

from singa_graph.ir.tensor import Tensor
from singa_graph.ops import attention as att
from singa_graph.runtime.registry import run_eager

from harness import Case, rand

X = rand(6, 10)
G, B = rand(10, seed=1), rand(10, seed=2)
MEAN = X.mean(1).astype(np.float32)
RSTD = (1 / np.sqrt(X.var(1) + 1e-5)).astype(np.float32)
Q, K, V = rand(2, 3, 5, 4, seed=3), rand(2, 3, 6, 4, seed=4), rand(2, 3, 6, 3, seed=5)
KEEP = rand(5, 6, seed=6) > -0.4
KEEP[:, 0] = True
ADD = rand(2, 1, 5, 6, seed=7)


def _swap(a):
    return np.ascontiguousarray(a.transpose(0, 2, 1, 3))


def _fwd(layout, causal, *extra):
    q, k, v = (Q, K, V) if layout == "bhsd" else (_swap(Q), _swap(K), _swap(V))
    op = att.ScaledDotProductAttention(causal, None, layout)
    ins = [q, k, v, *extra]
    return op, ins, _cpu_outputs(op, ins)


def _cpu_outputs(op, ins):
    """The CPU kernel's outputs: the saved state the backward cases start from."""
    ts = [Tensor(data=a, requires_grad=False) for a in ins]
    specs = op.infer(*ts)
    outs = [Tensor.symbolic(s.shape, s.dtype, ts[0].device) for s in specs]
    run_eager(op, ts, outs)
    return [o.data for o in outs]


CASES = [
    Case(att.LayerNorm(1), [X, G, B], name="LayerNorm rows"),
    Case(att.LayerNorm(1), [rand(3, 4, 5, seed=8), rand(4, 5, seed=9), rand(4, 5, seed=10)],
         name="LayerNorm two axes"),
    Case(att.LayerNormGrad(1), [rand(6, 10, seed=11), X, G, MEAN, RSTD], rtol=1e-4,
         atol=1e-5, name="LayerNormGrad"),
]
for layout in ("bhsd", "bshd"):
    for causal, extra, label in ((False, [], "plain"), (True, [KEEP], "causal bool mask"),
                                 (False, [ADD], "additive mask")):
        op, ins, (out, lse) = _fwd(layout, causal, *extra)
        CASES.append(Case(op, ins, rtol=1e-4, atol=1e-5,
                          name=f"Attention {layout} {label}"))
        dout = rand(*out.shape, seed=12)
        grad = att.ScaledDotProductAttentionGrad(causal, op.scale, layout)
        CASES.append(Case(grad, [dout, *ins[:3], out, lse, *extra], rtol=1e-4, atol=1e-5,
                          name=f"AttentionGrad {layout} {label}"))
