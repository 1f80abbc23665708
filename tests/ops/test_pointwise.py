"""Convolutions over few columns (runtime/kernels/cpu/pointwise.py): against numpy,
the GEMM path and any thread count (the fused epilogue: tests/passes/test_inference.py)."""
import numpy as np
import pytest

from singa_graph import ops
from singa_graph.runtime.kernels.cpu import conv, pointwise
from helpers import eager

# (N, C, O, H, W): the late 1x1 convs of mobilenet_v2 and squeezenet at 64x64, batch 2
SHAPES = [(2, 320, 1280, 2, 2), (2, 512, 100, 3, 3), (1, 300, 70, 1, 5), (3, 256, 33, 2, 1)]


def _numpy(x, w, b):
    y = np.einsum("oc,ncl->nol", w[:, :, 0, 0].astype(np.float64),
                  x.reshape(x.shape[0], x.shape[1], -1).astype(np.float64))
    return (y + b[None, :, None]).reshape(x.shape[0], w.shape[0], *x.shape[2:])


@pytest.mark.parametrize("shape", SHAPES)
def test_pointwise_matches_numpy_and_the_gemm_path(shape, monkeypatch):
    n, c, o, h, w = shape
    dtype = np.float32  # float64 convs run im2col + GEMM (tests/runtime/test_tiled.py)
    rng = np.random.default_rng(c)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    W = (rng.standard_normal((o, c, 1, 1)) / np.sqrt(c)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    assert pointwise.chosen(conv._Geom(ops.Conv2d(1, 0, 1, 1), x.shape, W.shape,
                                       (n, o, h, w), dtype))
    y = eager(lambda *t: ops.conv2d(*t), x, W, b)
    # float32 sums of C products in another order than numpy's: a few ulp of the terms
    tol = 1e-5
    np.testing.assert_allclose(y, _numpy(x, W, b), rtol=tol, atol=tol)
    monkeypatch.setattr(pointwise, "MAX_COLUMNS", 0)  # the per-sample GEMMs
    np.testing.assert_allclose(y, eager(lambda *t: ops.conv2d(*t), x, W, b), rtol=tol,
                               atol=tol)


def test_pointwise_results_do_not_depend_on_thread_count(monkeypatch):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 300, 3, 3)).astype(np.float32)
    W = rng.standard_normal((97, 300, 1, 1)).astype(np.float32)
    outs = []
    for t in (1, 2, 7):
        monkeypatch.setattr(conv.threads, "num_threads", lambda t=t: t)
        outs.append(eager(lambda *a: ops.conv2d(*a), x, W))
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])


# (C, O, kernel, stride, padding, dilation, H, W): convs with larger kernels on their
# patches, every geometry the gather handles (asymmetric pads, strides, dilation)
PATCH_CASES = [(64, 256, (3, 3), 1, 1, 1, 3, 3), (16, 40, (3, 2), (2, 1), (1, 0), (2, 1), 7, 6),
               (8, 24, (2, 3), 1, (0, 1, 1, 2), 1, 4, 5), (32, 300, (3, 3), 2, 1, 1, 5, 5),
               (20, 17, (5, 5), 1, 2, 1, 2, 2)]


@pytest.mark.parametrize("case", PATCH_CASES)
def test_patches_match_the_im2col_path(case, monkeypatch):
    c, o, k, s, p, d, h, w = case
    dtype = np.float32
    rng = np.random.default_rng(o)
    x = rng.standard_normal((2, c, h, w)).astype(dtype)
    W = (rng.standard_normal((o, c) + k) / np.sqrt(c * k[0] * k[1])).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    conv_ = lambda *t: ops.conv2d(*t, stride=s, padding=p, dilation=d)  # noqa: E731
    monkeypatch.setattr(pointwise, "MIN_PATCH_OUTPUTS", 1)
    monkeypatch.setattr(pointwise, "MIN_CHANNELS", 1)
    y_shape = ops.Conv2d(s, p, d, 1).output_shape(x.shape, W.shape)
    assert pointwise.chosen(conv._Geom(ops.Conv2d(s, p, d, 1), x.shape, W.shape, y_shape,
                                       dtype))
    y = eager(conv_, x, W, b)
    monkeypatch.setattr(pointwise, "MIN_PATCH_OUTPUTS", 0)  # im2col + GEMM
    want = eager(conv_, x, W, b)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
