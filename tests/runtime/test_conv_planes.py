"""Dense convs over few input channels (stems) on the output-row tiles of
runtime/kernels/cpu/conv_planes.py: which convs take them, every output against a float64
sum written plainly in numpy, the same bits on one thread and on two, and graph == eager
with gradients."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from singa_graph import ops
from singa_graph.ir.tensor import Tensor
from singa_graph.ops.conv_tiles import Conv2dDirect, on_planes
from singa_graph.runtime import threads as threads_policy
from singa_graph.runtime.kernels.cpu import conv_planes
from singa_graph.runtime.registry import bind, workspace_bytes
from helpers import conv_reference, graph_matches_eager

f32 = np.float32


@pytest.fixture(autouse=True)
def _planes_take_the_seven_by_seven_stems(monkeypatch):
    """With 32 vector registers the register tiles take 7x7 stems (ops.conv_tiles
    .stem_on_tiles, tested in test_conv_tiles.py); these tests are about the output-row
    tiles, so they run under the rule of 16-register processors wherever they run."""
    from singa_graph import host

    monkeypatch.setattr(host, "vector_registers", lambda: 16)


def _chosen(x, w, s=2, p=1, d=1, algo="auto", dtype=f32):
    op = ops.Conv2d(s, p, d, 1, algo=algo)
    return conv_planes.chosen(op, x, w, op.output_shape(x, w), dtype)


def test_which_convs_take_the_output_row_tiles():
    assert _chosen((2, 3, 64, 64), (32, 3, 3, 3))               # mobilenet_v2's stem
    assert _chosen((2, 3, 64, 64), (64, 3, 7, 7), p=3)          # resnet18's: 147 terms
    assert _chosen((2, 1, 28, 28), (16, 1, 5, 5), s=1)          # one channel
    assert _chosen((2, 3, 64, 64), (32, 3, 3, 3), d=2)
    assert not _chosen((2, 3, 64, 64), (32, 3, 3, 3), dtype=np.float64)  # ops._util.tiled
    assert not _chosen((2, 3, 64, 64), (64, 3, 3, 3), p=0)      # squeezenet's: GEMM rows
    assert not _chosen((2, 3, 64, 64), (96, 3, 4, 4), s=4, p=0)  # stride 4
    assert not _chosen((2, 8, 64, 64), (32, 8, 3, 3), s=1)      # 8 channels, stride 1
    assert not _chosen((2, 3, 64, 64), (32, 3, 3, 3), algo="direct")
    assert not _chosen((2, 3, 64, 64), (32, 3, 3, 3), dtype=np.float16)
    op = ops.Conv2d(2, 3)  # the inference pass leaves them to the plain Conv2d
    assert on_planes(op, (64, 3, 7, 7))
    assert not Conv2dDirect.wins(op, (2, 3, 64, 64), (64, 3, 7, 7), (2, 64, 32, 32), f32)


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_stride_two_convs_onto_whole_vectors_of_16_take_the_tiles_on_avx512(
        vector_bytes, monkeypatch):
    from singa_graph import host

    monkeypatch.setattr(host, "vector_bytes", lambda: vector_bytes)
    wide = vector_bytes == 64
    assert _chosen((2, 8, 64, 64), (32, 8, 3, 3)) is wide       # rows of 32
    assert _chosen((32, 16, 32, 32), (32, 16, 3, 3)) is wide    # the bench ResNet's: 16
    assert not _chosen((32, 32, 16, 16), (64, 32, 3, 3))        # rows of 8
    assert not _chosen((8, 64, 56, 56), (128, 64, 3, 3))        # rows of 28
    assert not _chosen((8, 64, 32, 32), (128, 64, 1, 1), p=0)   # a 1x1 shortcut
    assert not _chosen((32, 16, 32, 32), (32, 16, 3, 3), algo="direct")
    # stride 1: few channels onto rows of two vectors (Winograd's transforms cost more)
    assert _chosen((32, 16, 32, 32), (16, 16, 3, 3), s=1) is wide
    assert not _chosen((32, 16, 32, 32), (64, 16, 3, 3), s=1)   # 64 outputs
    assert not _chosen((32, 16, 16, 16), (16, 16, 3, 3), s=1)   # rows of 16


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_input_gradients_of_few_channels_run_the_flipped_forward_on_the_tiles(
        vector_bytes, monkeypatch):
    # stride 1, 16 -> 12 channels onto rows of 32: dx is the forward conv of dy with the
    # flipped kernel, 12 -> 16, on these tiles under AVX-512's rule (else Winograd); both
    # against the float64 im2col kernels
    from singa_graph import host
    from singa_graph.runtime.kernels.cpu import conv

    monkeypatch.setattr(host, "vector_bytes", lambda: vector_bytes)
    rng = np.random.default_rng(11)
    dy = rng.standard_normal((3, 12, 32, 32)).astype(f32)
    w = (rng.standard_normal((12, 16, 3, 3)) / 6).astype(f32)
    op = ops.Conv2dGradInput(1, 1, x_shape=(3, 16, 32, 32))
    _, flip = conv._grad_input_flip(op, w, dy, np.empty((3, 16, 32, 32), f32))
    assert (flip is not None and flip[0].algo == "auto") is (vector_bytes == 64)
    got = _run(op, [dy, w])
    want = _run(ops.Conv2dGradInput(1, 1, x_shape=(3, 16, 32, 32), algo="direct"),
                [dy.astype(np.float64), w.astype(np.float64)])
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


def _run(op, ins, threads=None):
    (spec,) = op.infer(*[Tensor.symbolic(a.shape, a.dtype) for a in ins])
    y = np.full(spec.shape, np.nan, spec.dtype)
    threads_policy.apply()  # now, not inside bind (which would undo the count set here)
    before = numba.get_num_threads()
    numba.set_num_threads(threads or before)
    try:
        ws = np.empty(workspace_bytes(op, ins, [y]), np.uint8)
        step = bind(op, ins, [y], ws=ws)
    finally:
        numba.set_num_threads(before)
    step()
    step()  # the second call runs the bound entry point (loops.bound)
    return y


CASES = [  # n, c, h, w, o, k, stride, pads, dilation, bias, residual, act
    (2, 3, 64, 64, 32, 3, 2, (1, 1, 1, 1), 1, True, False, "relu6"),  # 32 wide: 2 vectors
    (3, 3, 35, 71, 13, 7, 2, (3, 3, 3, 3), 1, False, True, "relu"),   # 13: R=1 tiles too
    (1, 1, 20, 9, 8, 5, 1, (2, 0, 1, 2), 1, True, True, "hardswish"),  # uneven padding
    (2, 4, 23, 41, 6, 3, 2, (0, 1, 2, 0), 1, False, False, "silu"),   # odd, uneven
    (2, 2, 17, 17, 16, 3, 1, (2, 2, 2, 2), 2, True, False, ""),       # dilation 2
    (3, 24, 32, 32, 20, 3, 2, (1, 1, 1, 1), 1, True, True, "relu"),   # whole rows of 16
    (2, 12, 20, 32, 16, 3, 1, (1, 1, 1, 1), 1, True, False, "relu"),  # stride 1: 2 x 16
]


@pytest.fixture
def _avx512_rules(monkeypatch):
    """The choices of a processor with AVX-512 (the kernels keep the machine's vectors,
    and are correct either way)."""
    from singa_graph import host

    monkeypatch.setattr(host, "vector_bytes", lambda: 64)


@pytest.mark.parametrize("case", CASES)
def test_every_output_matches_a_float64_sum_on_one_thread_and_two(case, _avx512_rules):
    n, c, h, wd, o, k, s, pads, d, has_b, has_res, act = case
    dtype = f32
    rng = np.random.default_rng(sum(case[:7]))
    x = rng.standard_normal((n, c, h, wd)).astype(dtype)
    w = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    op = ops.Conv2d(s, pads, d, 1, act=act, residual=has_res)
    y_shape = op.output_shape(x.shape, w.shape)
    assert conv_planes.chosen(op, x.shape, w.shape, y_shape, dtype)
    res = rng.standard_normal(y_shape).astype(dtype)
    extra = ([b] if has_b else []) + ([res] if has_res else [])
    got = _run(op, [x, w, *extra], threads=1)
    np.testing.assert_array_equal(_run(op, [x, w, *extra], threads=2), got)
    # _act is the epilogue's formula: the float64 im2col kernel, through the same epilogue,
    # agrees with the float64 reference under it
    want = conv_reference(x, w, b if has_b else None, s, pads, d, res if has_res else None, "")
    plain = ops.Conv2d(s, pads, d, 1, act=act, residual=has_res, algo="direct")  # im2col
    epilogue_only = _run(plain, [x.astype(np.float64), w.astype(np.float64),
                                 *[a.astype(np.float64) for a in extra]])
    np.testing.assert_allclose(epilogue_only, _act(want, act), rtol=1e-12, atol=1e-12)
    # the rounding of a sum of c*k*k products, then of the bias and residual adds, bounded
    # by the sum of their magnitudes (an activation's slope is at most 1.1)
    mag = conv_reference(np.abs(x), np.abs(w), np.abs(b) if has_b else None, s, pads, d,
                         np.abs(res) if has_res else None, "")
    tol = 1.1 * (c * k * k + 3) * np.finfo(dtype).eps * mag + np.finfo(dtype).tiny
    err = np.abs(got - _act(want, act))
    assert np.all(err <= tol), (err / tol).max()


def _act(v, act):
    if act == "relu":
        return np.maximum(v, 0)
    if act == "relu6":
        return np.clip(v, 0, 6)
    if act == "hardswish":
        return v * np.clip(v / 6 + 0.5, 0, 1)
    if act == "silu":
        return v / (1 + np.exp(-v))
    return v


def test_graph_matches_eager_with_gradients():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 24, 24)).astype(f32)
    w = (rng.standard_normal((16, 3, 3, 3)) / 5).astype(f32)
    b = rng.standard_normal(16).astype(f32)
    assert _chosen(x.shape, w.shape)
    graph_matches_eager(lambda *t: ops.conv2d(*t, stride=2, padding=1), x, w, b)


def test_graph_matches_eager_with_gradients_of_few_channels_at_stride_one(monkeypatch):
    from singa_graph import host

    monkeypatch.setattr(host, "vector_bytes", lambda: 64)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 16, 32, 32)).astype(f32)
    w = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(f32)
    assert _chosen(x.shape, w.shape, s=1)
    graph_matches_eager(lambda *t: ops.conv2d(*t, stride=1, padding=1), x, w)
