"""Plain Conv2d ops (training plans, eager runs) on the register tiles of Conv2dDirect
(runtime/kernels/cpu/conv_direct.py: ``chosen``, ``plain_forward``, ``block_weight``):
which convs take them, the same results as the inference op on weights blocked by numpy,
a float64 reference, graph == eager with gradients, and float16 through the staged
float32 kernel."""
from __future__ import annotations

import numpy as np
import pytest

from singa_graph import ops
from singa_graph.ops.conv_tiles import Conv2dDirect
from singa_graph.runtime.kernels.cpu import conv_direct
from helpers import blocked_weight, graph_matches_eager, run_step

f32 = np.float32


def _chosen(x, w, s=1, p=1, algo="auto", dtype=f32):
    op = ops.Conv2d(s, p, 1, 1, algo=algo)
    return conv_direct.chosen(op, x, w, op.output_shape(x, w), dtype)


def test_which_plain_convs_take_the_tiles():
    assert _chosen((8, 64, 16, 16), (128, 64, 3, 3), s=2)      # ResNet-18's stride 2
    assert _chosen((8, 128, 8, 8), (128, 128, 3, 3))            # 32 Winograd tiles
    assert _chosen((32, 32, 16, 16), (64, 32, 3, 3), s=2)
    assert not _chosen((8, 256, 4, 4), (512, 256, 3, 3), s=2)  # 32 outputs a weight
    assert not _chosen((8, 64, 16, 16), (128, 64, 3, 3), s=2, algo="direct")  # im2col asked
    assert not _chosen((64, 32, 14, 14), (64, 32, 3, 3))        # 1024 Winograd tiles
    assert not _chosen((32, 64, 8, 8), (64, 64, 3, 3))          # 128 tiles, 64 channels
    assert _chosen((16, 16, 16, 16), (16, 16, 3, 3))            # 256 tiles, 16 channels
    assert _chosen((16, 256, 8, 8), (256, 256, 3, 3))           # 64 tiles, 256 channels
    assert not _chosen((32, 256, 8, 8), (256, 256, 3, 3))       # 128 tiles
    assert not _chosen((64, 1, 28, 28), (32, 1, 3, 3))          # 9 terms an output
    assert not _chosen((32, 16, 32, 32), (32, 16, 1, 1), s=2, p=0)  # 16-channel 1x1
    assert not _chosen((2, 32, 80, 80), (32, 32, 3, 3))         # 6400 pixels a plane
    assert not _chosen((8, 64, 16, 16), (128, 64, 3, 3), s=2, dtype=np.float16)
    assert not _chosen((8, 64, 16, 16), (128, 64, 3, 3), s=2, dtype=np.float64)


def test_float64_takes_no_tile_kernel(monkeypatch):
    # the register tiles, channels-last depthwise kernels and dot products are float32's
    # (ops._util.tiled): float64 runs the plane loops, im2col and BLAS
    from singa_graph.runtime.kernels.cpu import conv, depthwise, dots, linalg, pointwise

    for dt, want in ((f32, True), (np.float64, False)):
        dw = ops.Conv2d(1, 1, 1, 64)
        y = np.zeros((2, 64, 4, 4), dt)
        assert depthwise._is_last(dw, (64, 1, 3, 3), y) is want
        assert depthwise._dx_is_last(dw, (64, 1, 3, 3), y) is want
        dy, x, w = (np.zeros(s, dt) for s in [(2, 64, 4, 4), (2, 64, 4, 4), (64, 1, 3, 3)])
        assert (depthwise._dw_last_plan(dw, [dy, x], [w]) is not None) is want
        gm = conv._Geom(ops.Conv2d(1, 0), (2, 320, 2, 2), (1280, 320, 1, 1),
                        (2, 1280, 2, 2), dt)
        assert pointwise.chosen(gm) is want
    a, b = np.ones((2, 64)), np.ones((100, 64)).T  # a classifier's rows by a transposed weight
    monkeypatch.setattr(dots, "rows_by_dots", lambda *args: pytest.fail("dots in float64"))
    c = np.zeros((2, 100))
    linalg.split_matmul(a, b, c)()
    np.testing.assert_array_equal(c, a @ b)


CASES = [  # n, c, h, w, o, k, stride, pad, bias, residual, act
    (4, 16, 16, 16, 32, 3, 2, 1, True, False, ""),
    (3, 24, 9, 7, 40, 3, 1, 1, False, True, "relu"),   # 40 outputs: a half-filled block
    (6, 8, 10, 10, 64, 5, 2, 2, True, True, "relu6"),
]


@pytest.mark.parametrize("case", CASES)
def test_plain_conv_equals_the_inference_op_and_a_float64_reference(case):
    n, c, h, wd, o, k, s, p, has_b, has_res, act = case
    dtype = f32
    rng = np.random.default_rng(sum(case[:6]))
    x = rng.standard_normal((n, c, h, wd)).astype(dtype)
    w = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    op = ops.Conv2d(s, p, 1, 1, act=act, residual=has_res)
    y_shape = op.output_shape(x.shape, w.shape)
    assert conv_direct.chosen(op, x.shape, w.shape, y_shape, dtype)
    res = rng.standard_normal(y_shape).astype(dtype)
    extra = ([b] if has_b else []) + ([res] if has_res else [])
    got = run_step(op, [x, w, *extra])
    blocked = run_step(Conv2dDirect.of(op, o), [x, blocked_weight(w), *extra])
    np.testing.assert_array_equal(got, blocked)
    plain = ops.Conv2d(s, p, 1, 1, act=act, residual=has_res, algo="direct")  # im2col
    want = run_step(plain, [x.astype(np.float64), w.astype(np.float64),
                        *[a.astype(np.float64) for a in extra]])
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got, want, rtol=0,
                               atol=8 * eps * np.sqrt(c * k * k) * (np.abs(want).max() + 1))


def test_seven_by_seven_stems_take_the_register_tiles_with_32_vector_registers(monkeypatch):
    from singa_graph import host
    from singa_graph.runtime.kernels.cpu import conv_planes

    stem = ops.Conv2d(2, 3, act="relu")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 20, 20)).astype(f32)
    w = (rng.standard_normal((40, 3, 7, 7)) / 12).astype(f32)
    y = stem.output_shape(x.shape, w.shape)
    want = run_step(ops.Conv2d(2, 3, act="relu", algo="direct"),
                    [x.astype(np.float64), w.astype(np.float64)])
    for registers, tiles in ((32, True), (16, False)):
        monkeypatch.setattr(host, "vector_registers", lambda: registers)
        assert conv_direct.chosen(stem, x.shape, w.shape, y, f32) is tiles
        assert conv_planes.chosen(stem, x.shape, w.shape, y, f32) is not tiles
        five = ops.Conv2d(2, 2)  # 5x5 stems keep the output-row tiles everywhere
        assert conv_planes.chosen(five, x.shape, (40, 3, 5, 5), (2, 40, 10, 10), f32)
        got = run_step(stem, [x, w])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_block_weight_lays_out_blocks_of_output_channels():
    w = np.arange(40 * 3 * 2 * 2, dtype=f32).reshape(40, 3, 2, 2)
    wb = np.full(Conv2dDirect.blocked_shape(w.shape, f32), np.nan, f32)
    conv_direct.block_weight(w, wb, 2)
    np.testing.assert_array_equal(wb, blocked_weight(w))


def test_graph_matches_eager_with_gradients():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 16, 12, 12)).astype(f32)
    w = (rng.standard_normal((32, 16, 3, 3)) / 12).astype(f32)
    b = rng.standard_normal(32).astype(f32)
    assert conv_direct.chosen(ops.Conv2d(2, 1), x.shape, w.shape, (4, 32, 6, 6), f32)
    graph_matches_eager(lambda *t: ops.conv2d(*t, stride=2, padding=1), x, w, b)


def test_float16_runs_the_tiles_on_float32_copies():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 16, 12, 12)).astype(np.float16)
    w = (rng.standard_normal((32, 16, 3, 3)) / 12).astype(np.float16)
    got = run_step(ops.Conv2d(2, 1), [x, w])
    want = run_step(ops.Conv2d(2, 1), [x.astype(f32), w.astype(f32)]).astype(np.float16)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kh,kw,nc,vecs", [(3, 3, 64, 2), (3, 3, 512, 2), (1, 1, 1024, 4),
                                           (3, 3, 16, 2)])
def test_weight_pieces_cover_the_order_and_sum_bit_for_bit(kh, kw, nc, vecs):
    # a block's sums taken in pieces that fit the L1 cache (conv_direct.pieces), stored and
    # reloaded between them, are the single chain of multiply-adds in (i, j, c) order
    from numba import njit
    from singa_graph.runtime.kernels.cpu import simd

    rows, lanes = 16, simd.lanes(np.float32)
    ph, pw, pc = conv_direct.pieces(kh, kw, nc, vecs, rows)
    per = vecs * simd.VECTOR_BYTES
    assert (ph, pw, pc) == (kh, kw, nc) or ph * pw * pc * per <= conv_direct.PIECE_BYTES
    assert (pw, pc) == (kw, nc) or (ph, pw) == (1, 1)  # runs of the (i, j, c) order
    tile = simd.tile(8, vecs, True)

    @njit
    def run(x, offs, w, y, ph, pw, pc, ri, rj, rc):
        slab = kh * kw * nc * lanes
        for i in range(0, kh, ph):
            for j in range(0, kw, pw):
                for c in range(0, nc, pc):
                    for p in range(0, rows, 8):
                        tile(x, i * ri + j * rj + c * rc, offs, p, w,
                             ((i * kw + j) * nc + c) * lanes, lanes, slab, y, p * vecs * lanes,
                             vecs * lanes, min(pc, nc - c), ph, pw, ri, rj, rc, lanes,
                             1 if i + j + c > 0 else 0)

    g = np.random.default_rng(nc)
    h = w_ = 8
    x = g.standard_normal(nc * (h + kh) * (w_ + kw)).astype(f32)
    offs = np.arange(rows, dtype=np.int64)
    rc, ri, rj = (h + kh) * (w_ + kw), w_ + kw, 1  # channel planes, as Conv2dDirect's
    wt = g.standard_normal(vecs * kh * kw * nc * lanes).astype(f32)
    whole, piecewise = (np.full(rows * vecs * lanes, np.nan, f32) for _ in range(2))
    run(x, offs, wt, whole, kh, kw, nc, ri, rj, rc)
    run(x, offs, wt, piecewise, ph, pw, pc, ri, rj, rc)
    np.testing.assert_array_equal(piecewise, whole)
    # and the sums are right: a float64 reference, each output a dot of its taps
    ref = np.zeros((rows, vecs * lanes))
    for r in range(rows):
        for v in range(vecs):
            for i in range(kh):
                for j in range(kw):
                    for c in range(nc):
                        wv = wt[v * kh * kw * nc * lanes + ((i * kw + j) * nc + c) * lanes:][:lanes]
                        ref[r, v * lanes:(v + 1) * lanes] += \
                            np.float64(x[r + i * ri + j * rj + c * rc]) * wv
    np.testing.assert_allclose(whole.reshape(rows, -1), ref, rtol=1e-4, atol=1e-3)
