"""Convolutions on channels-last activations (Conv2dNHWC,
runtime/kernels/cpu/conv_channels_last.py), against a plain float64 numpy convolution, and
the NCHW <-> NHWC Transpose and the mean over middle axes that channels-last plans lean
on."""
from __future__ import annotations

import numpy as np
import pytest

from singa_graph.ir.tensor import Tensor
from singa_graph.ops.conv_tiles import Conv2dNHWC
from singa_graph.ops.reduce import Mean
from singa_graph.ops.shape import Transpose

FEW_PIXELS = 16  # pointwise convs over this few pixels: weights (O, C), dot products


def _t(a):
    return Tensor(data=np.asarray(a), requires_grad=False)


def _reference(x, w, b, stride, pad, dil, groups):
    """NCHW conv in float64, one tap at a time."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wi = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    wo = (wi + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, o, ho, wo))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                win = xs[:, :, i * dil:i * dil + stride * (ho - 1) + 1:stride,
                         j * dil:j * dil + stride * (wo - 1) + 1:stride]
                y[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", win,
                                                       w[g * og:(g + 1) * og, :, i, j])
    return y + (0 if b is None else b.astype(np.float64).reshape(1, -1, 1, 1))


def _act(y, act):
    return {"": y, "relu": np.maximum(y, 0), "relu6": np.clip(y, 0, 6),
            "hardswish": y * np.clip(y / 6 + 0.5, 0, 1),
            "silu": y / (1 + np.exp(-y))}[act]


CASES = [  # (n, c, h, o, k, stride, dilation, groups)
    (2, 16, 12, 24, 1, 1, 1, 1),    # pointwise, GEMM over pixel rows
    (2, 16, 8, 40, 1, 1, 1, 1),     # pointwise on the register tiles, rows split
    (1, 300, 3, 40, 1, 1, 1, 1),    # pointwise over few pixels, dot products (C >= 256)
    (2, 40, 2, 72, 1, 1, 1, 1),     # pointwise over few pixels, columns (C < 256)
    (2, 64, 1, 24, 1, 1, 1, 1),     # two pixels: dot products of four weight rows by two
    (3, 40, 1, 18, 1, 1, 1, 1),     # three: by two and one, then the rows left
    (2, 24, 9, 24, 3, 1, 1, 24),    # depthwise by rows (stride 1, wide)
    (2, 48, 4, 48, 3, 1, 1, 48),    # depthwise by pixels (narrow)
    (2, 20, 11, 20, 3, 2, 1, 20),   # strided
    (1, 17, 8, 17, 5, 2, 1, 17),    # 5x5 strided, odd channel count
    (2, 32, 10, 32, 3, 1, 2, 32),   # dilated by rows
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("act,residual,bias", [("", False, True), ("relu6", True, True),
                                               ("hardswish", False, False),
                                               ("silu", True, False)])
def test_conv_nhwc_matches_numpy(case, act, residual, bias):
    n, c, h, o, k, s, d, g = case
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    w = (rng.standard_normal((o, c // g, k, k)) / np.sqrt(c // g * k * k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32) if bias else None
    pad = d * (k // 2)
    ref = _reference(x, w, b, s, pad, d, g)
    r = rng.standard_normal(ref.shape).astype(np.float32) if residual else None
    if residual:
        ref = ref + r
    ref = _act(ref, act)
    op = Conv2dNHWC(s, pad, d, g, act=act, residual=residual)
    few = n * h * h <= FEW_PIXELS and k == 1
    if few:
        op.weight_layout = "OIHW"
    wk = w if few else np.ascontiguousarray(w.transpose(2, 3, 1, 0))
    ins = [np.ascontiguousarray(x.transpose(0, 2, 3, 1)), wk] + ([b] if bias else []) + \
        ([np.ascontiguousarray(r.transpose(0, 2, 3, 1))] if residual else [])
    y = op(*[_t(a) for a in ins]).data
    np.testing.assert_allclose(y.transpose(0, 3, 1, 2), ref, rtol=2e-5,
                               atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("case", CASES)
def test_conv_nhwc_serial_and_parallel_twins_agree(case, monkeypatch):
    """Small convs run on the calling thread (PARALLEL_MACS, and for depthwise convs
    SERIAL_DEPTHWISE_PIXELS): the serial twin of each loop gives the parallel one's results
    bit for bit."""
    from singa_graph.runtime.kernels.cpu import conv_channels_last as kernels

    n, c, h, o, k, s, d, g = case
    rng = np.random.default_rng(7)
    x = np.ascontiguousarray(rng.standard_normal((n, h, h, c)).astype(np.float32))
    few = n * h * h <= FEW_PIXELS and k == 1
    w = rng.standard_normal((o, c, 1, 1) if few else (k, k, c // g, o)).astype(np.float32)
    op = Conv2dNHWC(s, d * (k // 2), d, g, act="relu")
    if few:
        op.weight_layout = "OIHW"
    out = []
    for macs, pixels in ((0, -1), (1 << 62, 1 << 62)):
        monkeypatch.setattr(kernels, "PARALLEL_MACS", macs)
        monkeypatch.setattr(kernels, "SERIAL_DEPTHWISE_PIXELS", pixels)
        monkeypatch.setattr(kernels, "SERIAL_DEPTHWISE_VECTORS", 1 << 62)
        out.append(op(_t(x), _t(w)).data)
    np.testing.assert_array_equal(out[0], out[1])


@pytest.mark.parametrize("c,h,k,s,parallel", [
    (576, 2, 5, 1, False),  # 4 of 25 taps inside a 2x2 plane: a few microseconds serial
    (288, 4, 5, 2, False),
    (240, 4, 3, 1, False),
    (576, 4, 3, 1, True),   # 16 pixels but 7200 vector multiply-adds
    (72, 8, 5, 1, True),    # 128 pixels: the parallel loop wins
    (24, 32, 3, 2, True),
])
def test_small_depthwise_convs_run_on_the_calling_thread(c, h, k, s, parallel):
    from singa_graph.runtime.kernels.cpu import conv_channels_last as kernels

    op = Conv2dNHWC(s, k // 2, 1, c)
    ho = (h + 2 * (k // 2) - k) // s + 1
    assert kernels._depthwise_parallel(op, (2, h, h, c), (k, k, 1, c), (2, ho, ho, c),
                                       16) is parallel
    # the taps inside, counted for one axis: a 5x5 kernel on 2 positions, padding 2
    assert kernels._taps_inside(5, 1, 2, 1, 2, 2) == 4
    assert kernels._taps_inside(3, 1, 1, 1, 4, 4) == 10


@pytest.mark.parametrize("n,c,h,o", [(2, 96, 2, 200), (1, 40, 3, 70), (2, 8, 1, 1000),
                                     (2, 24, 1, 58), (1, 16, 1, 30)])
def test_pointwise_tiles_over_few_pixels(n, c, h, o, monkeypatch):
    """A (C, O) weight over few pixels (a BatchNorm fold's) runs on the register tiles,
    split by output columns: every column block's epilogue (bias, residual, ReLU6) lands
    on its own columns, and the threads do not change a bit."""
    from singa_graph.runtime.kernels.cpu import conv_channels_last as kernels

    rng = np.random.default_rng(n * c + o)
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    w = (rng.standard_normal((o, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    ref = _reference(x, w, b, 1, 0, 1, 1)
    r = rng.standard_normal(ref.shape).astype(np.float32)
    ref = _act(ref + r, "relu6")
    op = Conv2dNHWC(1, 0, 1, 1, act="relu6", residual=True)
    ins = [_t(np.ascontiguousarray(a)) for a in (x.transpose(0, 2, 3, 1),
                                                 w.transpose(2, 3, 1, 0), b,
                                                 r.transpose(0, 2, 3, 1))]
    out = []
    for macs in (0, 1 << 62):
        monkeypatch.setattr(kernels, "PARALLEL_MACS", macs)
        out.append(op(*ins).data)
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_allclose(out[0].transpose(0, 3, 1, 2), ref, rtol=2e-5,
                               atol=2e-5 * np.abs(ref).max())


# (n, c, h, w, k, stride, pad, dilation): borders on every side, pads over the kernel,
# dilation, stride 3, channel counts that leave a partial vector or need several blocks
DEPTHWISE_TILES = [(2, 37, 9, 11, 3, 1, 1, 1), (1, 70, 8, 8, 5, 2, 2, 1),
                   (2, 16, 10, 9, 3, 2, 1, 2), (1, 24, 7, 12, 3, 3, 1, 1),
                   (2, 19, 3, 3, 3, 2, 4, 1), (1, 8, 2, 2, 5, 1, 2, 1),
                   (1, 130, 6, 5, 7, 1, 3, 1), (2, 150, 5, 4, 3, 1, 2, 2)]


@pytest.mark.parametrize("case", DEPTHWISE_TILES)
def test_depthwise_tiles_are_the_loop_kernels_sums(case, monkeypatch):
    """The register tiles (simd.depthwise_tile) add each output's taps inside the input in
    the order of the NCHW channels-innermost loop kernel: the same values bit for bit,
    NaNs and signed zeros included; the ReLU after them is the formula's."""
    from singa_graph import ops
    from singa_graph.runtime.kernels.cpu import depthwise
    from helpers import eager

    n, c, h, w, k, s, p, d = case
    dtype = np.float32  # the tiles' only dtype (ops._util.tiled)
    monkeypatch.setattr(depthwise, "LAST_PLANE", 1 << 30)
    monkeypatch.setattr(depthwise, "LAST_PLANE_STRIDED", 1 << 30)
    rng = np.random.default_rng(c + h)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    x[rng.random(x.shape) < 0.05] = np.nan
    x[rng.random(x.shape) < 0.1] = -0.0
    W = rng.standard_normal((c, 1, k, k)).astype(dtype)
    b = rng.standard_normal(c).astype(dtype)
    xl, wl = (np.ascontiguousarray(a) for a in (x.transpose(0, 2, 3, 1), W.transpose(2, 3, 1, 0)))
    for bias in (b, None):
        extra = [] if bias is None else [bias]
        want = eager(lambda *t: ops.Conv2d(s, p, d, c)(*t), x, W, *extra)
        for act in ("", "relu"):
            got = Conv2dNHWC(s, p, d, c, act=act)(*[_t(a) for a in [xl, wl] + extra]).data
            ref = np.where((want > 0) | np.isnan(want), want, 0).astype(dtype) if act else want
            np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), ref)
            assert (np.signbit(got.transpose(0, 3, 1, 2)) == np.signbit(ref)).all()


def test_conv_nhwc_refuses_what_it_has_no_kernel_for():
    with pytest.raises(Exception, match="pointwise and depthwise"):
        Conv2dNHWC(1, 1)(_t(np.zeros((1, 5, 5, 4), np.float32)),
                         _t(np.zeros((3, 3, 4, 8), np.float32)))
    with pytest.raises(Exception, match="float32, not float64"):
        Conv2dNHWC(1, 1, 1, 4)(_t(np.zeros((1, 5, 5, 4))), _t(np.zeros((3, 3, 1, 4))))


@pytest.mark.parametrize("shape", [(2, 32, 32, 32), (1, 7, 5, 3), (3, 200, 9, 9)])
def test_channel_transposes_and_middle_mean(shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for perm in [(0, 2, 3, 1), (0, 3, 1, 2)]:
        assert np.array_equal(Transpose(perm)(_t(x)).data, x.transpose(perm))
    for axes in [(1, 2), (1,), (2,)]:
        got = Mean(axes, True)(_t(x)).data
        np.testing.assert_allclose(got, x.astype(np.float64).mean(axis=axes, keepdims=True),
                                   rtol=1e-5, atol=1e-6)
