"""Weight gradients of strided convs on the register tiles
(runtime/kernels/cpu/conv_direct_grad_weight.py): which convs take them, a float64
reference (the im2col + GEMM path) over paddings, dilations, uneven parts and output
channels that fill part of a vector, and float16 through the staged float32 kernel."""
from __future__ import annotations

import numpy as np
import pytest

from singa_graph import ops
from singa_graph.runtime.kernels.cpu import conv_direct_grad_weight as tiles
from helpers import run_step

f32 = np.float32


def _chosen(w, s=2, groups=1, dtype=f32):
    return tiles.chosen(ops.Conv2d(s, 1, 1, groups), (4, w[1] * groups, 16, 16), w, dtype)


def test_which_weight_gradients_take_the_tiles():
    assert _chosen((32, 16, 3, 3))                   # ResNet's stride-2 3x3
    assert _chosen((64, 3, 7, 7))                    # a strided stem
    assert not _chosen((32, 16, 3, 3), s=1)          # stride 1: GEMM or Winograd
    assert not _chosen((32, 16, 1, 1))               # a strided 1x1 gathers nothing
    assert not _chosen((32, 8, 3, 3), groups=2)      # grouped
    assert not _chosen((32, 16, 3, 3), dtype=np.float64)


CASES = [  # n, c, h, w, o, k, stride, pad, dilation, threads
    (4, 16, 16, 16, 32, 3, 2, 1, 1, 2),
    (5, 8, 11, 9, 40, 3, 2, 1, 1, 2),    # 40 outputs: a masked last vector; parts 2 + 3
    (3, 6, 13, 13, 24, 5, 2, 2, 1, 1),
    (2, 4, 15, 12, 20, 3, 3, 0, 2, 2),   # no padding: the tiles read the input itself
    (1, 3, 20, 20, 16, 7, 2, 3, 1, 2),   # one sample: one part sums it, the other none
]


@pytest.mark.parametrize("case", CASES)
def test_weight_gradient_matches_a_float64_reference(case):
    n, c, h, wd, o, k, s, p, d, nt = case
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((n, c, h, wd)).astype(f32)
    y_shape = ops.Conv2d(s, p, d).output_shape(x.shape, (o, c, k, k))
    dy = rng.standard_normal(y_shape).astype(f32)
    op = ops.Conv2dGradWeight(s, p, d, 1, w_shape=(o, c, k, k))
    assert tiles.chosen(op, x.shape, (o, c, k, k), f32)
    got = run_step(op, [dy, x], nthreads=nt)
    want = run_step(op, [dy.astype(np.float64), x.astype(np.float64)])
    terms = n * y_shape[2] * y_shape[3]
    eps = np.finfo(f32).eps
    np.testing.assert_allclose(got, want, rtol=0,
                               atol=4 * eps * np.sqrt(terms) * np.abs(want).max())


def test_float16_runs_the_tiles_on_float32_copies():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 16, 12, 12)).astype(np.float16)
    dy = rng.standard_normal((4, 32, 6, 6)).astype(np.float16)
    op = ops.Conv2dGradWeight(2, 1, w_shape=(32, 16, 3, 3))
    got = run_step(op, [dy, x])
    want = run_step(op, [dy.astype(f32), x.astype(f32)]).astype(np.float16)
    np.testing.assert_array_equal(got, want)
