"""Convolutions whose batch runs in several chunks (the workspace bound), and the bound
itself on shapes far too big to run here.

The chunk size is :data:`conv.COLUMN_BYTES` over the per-sample scratch; the cases lower it
so that a batch of 3 runs as chunks of 2 + 1 (the batched GEMMs, the permuting epilogue,
the weight gradient accumulating over chunks, and a last chunk of one sample) or as 3 chunks
of one sample.
"""
import numpy as np
import pytest

from singa_graph.ir.tensor import TensorSpec
from singa_graph.ops import conv as conv_ops
from singa_graph.runtime import registry
from singa_graph.runtime.kernels.cuda import conv

from cases_conv_pool import conv_cases
from harness import check

# (name, C, O, groups, kernel, stride, padding, dilation, H, W, bias, relu): rows = C*kh*kw
# is at least 2 O, so two samples of every op's scratch fit the budget and three do not
GEOMETRIES = [
    ("3x3 bias relu", 2, 2, 1, (3, 3), 2, 1, 1, 5, 5, True, True),
    ("groups 2", 4, 2, 2, (2, 2), 2, 0, 1, 5, 5, True, False),
]
CASES = [c for i, g in enumerate(GEOMETRIES)
         for c in conv_cases(g[0], 3, *g[1:], np.float32, seed=500 + 10 * i)]


def _budget(case, samples):
    """COLUMN_BYTES for chunks of ``samples`` samples of this case's conv."""
    op = case.op
    if op.type == "Conv2d":
        x, w = case.inputs[:2]
    elif op.type == "Conv2dGradInput":
        x, w = np.empty(op.x_shape, np.float32), case.inputs[1]
    else:
        x, w = case.inputs[1], np.empty(op.w_shape, np.float32)
    o, cg, kh, kw = w.shape
    ho, wo = case.inputs[0].shape[2:] if op.type != "Conv2d" else op.output_shape(
        x.shape, w.shape)[2:]
    return samples * (x.shape[1] * kh * kw + o) * ho * wo * 4


@pytest.mark.parametrize("samples", [1, 2], ids=["chunks of 1", "chunks of 2"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_chunked_conv_matches_cpu(case, samples, gpu, monkeypatch):
    monkeypatch.setattr(conv, "COLUMN_BYTES", _budget(case, samples))
    check(case, gpu)


def _specs(n, c, h, w, o, k, stride, pad, groups=1):
    op = conv_ops.Conv2d(stride, pad, 1, groups)
    x, wt = (n, c, h, w), (o, c // groups, k, k)
    y = op.output_shape(x, wt)
    f32 = np.dtype(np.float32)
    return op, TensorSpec(x, f32), TensorSpec(wt, f32), TensorSpec(y, f32)


@pytest.mark.parametrize("shape", [
    (128, 3, 224, 224, 64, 7, 2, 3),      # ResNet's stem: 7.4 MB of columns per sample
    (128, 64, 56, 56, 64, 3, 1, 1),
    (128, 512, 7, 7, 512, 3, 1, 1),
    (2, 256, 512, 512, 256, 3, 1, 1),     # one sample alone exceeds the budget
], ids=["stem", "3x3 56x56", "3x3 7x7", "over budget"])
def test_workspace_is_a_chunk_of_the_batch(shape, gpu):
    op, x, w, y = _specs(*shape)
    n, c = shape[:2]
    rows, l, o = c * w.shape[2] * w.shape[3], y.shape[2] * y.shape[3], y.shape[1]
    gi = conv_ops.Conv2dGradInput(op.stride, op.padding, 1, 1, x_shape=x.shape)
    gw = conv_ops.Conv2dGradWeight(op.stride, op.padding, 1, 1, w_shape=w.shape)
    sizes = {
        "fwd": (registry.workspace_bytes(op, [x, w], [y], "cuda"), rows * l),
        "dx": (registry.workspace_bytes(gi, [y, w], [x], "cuda"), rows * l),
        "dw": (registry.workspace_bytes(gw, [y, x], [w], "cuda"), (rows + o) * l),
    }
    for what, (got, per_sample) in sizes.items():
        per = per_sample * 4
        m = max(1, min(n, conv.COLUMN_BYTES // per))
        assert got >= m * rows * l * 4, what  # the chunk's columns at least
        assert got <= max(conv.COLUMN_BYTES, per) + 4 * registry.ALIGN, what
