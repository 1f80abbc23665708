"""Winograd F(4x4, 3x3) convolution: its error against float64, the algorithm choice, and
that graph and eager runs still agree bit for bit."""
import numpy as np
import pytest

from singa_graph import ops
from singa_graph.ir import op_class
from singa_graph.runtime.kernels.cpu import winograd, winograd_grad_weight
from singa_graph.runtime.registry import bind, workspace_bytes
from tests.helpers import eager, graph_matches_eager

rng = np.random.default_rng(7)

# (n, c, o, h, w, pads): odd sizes, every padding 0..2 (asymmetric too), 1..96 channels
SHAPES = [(1, 1, 1, 3, 3, (0, 0, 0, 0)), (2, 3, 5, 7, 9, (1, 1, 1, 1)),
          (3, 16, 16, 32, 32, (1, 1, 1, 1)), (1, 4, 6, 5, 5, (0, 0, 0, 0)),
          (2, 8, 4, 6, 11, (2, 0, 1, 2)), (2, 5, 7, 13, 4, (0, 2, 2, 1)),
          (5, 32, 24, 9, 10, (1, 1, 1, 1)), (2, 96, 64, 8, 8, (1, 1, 1, 1)),
          (1, 2, 3, 1, 1, (1, 1, 1, 1)), (4, 6, 2, 17, 3, (2, 2, 2, 2))]


def _reference(x, w, pads):
    """float64 cross-correlation by shifted sums, independent of every kernel here."""
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    ho, wo = xp.shape[2] - 2, xp.shape[3] - 2
    y = np.zeros((x.shape[0], w.shape[0], ho, wo))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i:i + ho, j:j + wo],
                           w[:, :, i, j].astype(np.float64))
    return y


def _run(op, ins, out_shape, dtype):
    out = np.empty(out_shape, dtype)
    ws = np.empty(workspace_bytes(op, ins, [out]), np.uint8)
    bind(op, ins, [out], ws=ws)()
    return out


def _assert_within_bound(got, ref, bound, dtype):
    err = np.abs(got.astype(np.float64) - ref)
    limit = winograd.ERROR_BOUND * np.finfo(dtype).eps * bound
    assert np.all(err <= limit), f"worst error / bound = {np.max(err / limit):.3g}"


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_input_gradient_within_bound(shape):
    dtype = np.float32  # float64 never takes Winograd (test_float64_always_runs_im2col)
    n, c, o, h, w_, pads = shape
    x = rng.standard_normal((n, c, h, w_)).astype(dtype)
    w = rng.standard_normal((o, c, 3, 3)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    op = ops.Conv2d(1, pads, algo="winograd")
    assert winograd.chosen(op, x.shape, w.shape, dtype)
    y_shape = op.output_shape(x.shape, w.shape)
    y = _run(op, [x, w, b], y_shape, dtype)
    _assert_within_bound(y, _reference(x, w, pads) + b[:, None, None],
                         _reference(np.abs(x), np.abs(w), pads) + np.abs(b)[:, None, None], dtype)
    # dx = conv(dy, w rotated, channels swapped), padded by 2 - pad
    dy = rng.standard_normal(y_shape).astype(dtype)
    gop = ops.Conv2dGradInput(1, pads, x_shape=x.shape, algo="winograd")
    dx = _run(gop, [dy, w], x.shape, dtype)
    wt = w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
    flipped = tuple(2 - p for p in pads)
    _assert_within_bound(dx, _reference(dy, wt, flipped), _reference(np.abs(dy), np.abs(wt),
                                                                       flipped), dtype)


def _reference_grad_weight(dy, x, pads):
    """float64 ``dW[o, c, i, j] = sum dy[n, o] * x_padded[n, c] shifted by (i, j)``."""
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    ho, wo = dy.shape[2], dy.shape[3]
    dw = np.zeros((dy.shape[1], x.shape[1], 3, 3))
    for i in range(3):
        for j in range(3):
            dw[:, :, i, j] = np.einsum("nohw,nchw->oc", dy.astype(np.float64),
                                       xp[:, :, i:i + ho, j:j + wo])
    return dw


@pytest.mark.parametrize("shape", SHAPES)
def test_weight_gradient_within_bound(shape):
    dtype = np.float32  # float64 never takes Winograd (test_float64_always_runs_im2col)
    n, c, o, h, w_, pads = shape
    x = rng.standard_normal((n, c, h, w_)).astype(dtype)
    y_shape = ops.Conv2d(1, pads).output_shape(x.shape, (o, c, 3, 3))
    dy = rng.standard_normal(y_shape).astype(dtype)
    op = ops.Conv2dGradWeight(1, pads, w_shape=(o, c, 3, 3), algo="winograd")
    assert winograd.chosen(op, x.shape, (o, c, 3, 3), dtype)
    dw = _run(op, [dy, x], (o, c, 3, 3), dtype)
    err = np.abs(dw - _reference_grad_weight(dy, x, pads))
    limit = (winograd_grad_weight.GRAD_WEIGHT_ERROR_BOUND * np.finfo(dtype).eps
             * _reference_grad_weight(np.abs(dy), np.abs(x), pads))
    assert np.all(err <= limit), f"worst error / bound = {np.max(err / limit):.3g}"


def test_weight_gradient_algorithm_choice():
    shapes = ((32, 16, 32, 32), (16, 16, 3, 3))
    gw = ops.Conv2dGradWeight(1, 1, w_shape=shapes[1])
    assert gw.algo == "auto" and winograd.chosen(gw, *shapes, np.float32)
    direct = ops.Conv2dGradWeight(1, 1, w_shape=shapes[1], algo="direct")
    assert not winograd.chosen(direct, *shapes, np.float32)


def test_fused_relu_epilogue():
    x = rng.standard_normal((2, 8, 7, 6)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    plain = _run(ops.Conv2d(1, 1, algo="winograd"), [x, w, b], (2, 8, 7, 6), np.float32)
    fused = _run(ops.Conv2d(1, 1, relu=True, algo="winograd"), [x, w, b], (2, 8, 7, 6),
                 np.float32)
    np.testing.assert_array_equal(fused, np.maximum(plain, 0))


@pytest.mark.parametrize("act", ["relu", "hardswish", "silu", "relu6"])
def test_inference_epilogue_equals_separate_ops(act):
    """A residual add and an activation fused by the inference passes, on Winograd convs,
    give the bits of the convolution followed by the Add and activation ops."""
    x = rng.standard_normal((2, 8, 7, 6)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    r = rng.standard_normal((2, 8, 7, 6)).astype(np.float32)
    plain = _run(ops.Conv2d(1, 1, algo="winograd"), [x, w, b], (2, 8, 7, 6), np.float32)
    v = _run(op_class("Add")(), [plain, r], plain.shape, np.float32)
    if act == "relu":
        want = _run(op_class("ReLU")(), [v], v.shape, np.float32)
    elif act == "relu6":  # as the importer builds it: Max(x, 0) then Min(., 6)
        m = _run(op_class("Max")(), [v, np.zeros(1, np.float32)], v.shape, np.float32)
        want = _run(op_class("Min")(), [m, np.full(1, 6, np.float32)], v.shape, np.float32)
    else:  # x * HardSigmoid(x, 1/6, 1/2) and x * Sigmoid(x)
        gate = (op_class("HardSigmoid")(1 / 6, 0.5) if act == "hardswish"
                else op_class("Sigmoid")())
        g = _run(gate, [v], v.shape, np.float32)
        want = _run(op_class("Mul")(), [v, g], v.shape, np.float32)
    fused = _run(ops.Conv2d(1, 1, act=act, residual=True, algo="winograd"), [x, w, b, r],
                 plain.shape, np.float32)
    np.testing.assert_array_equal(fused, want)


def test_algorithm_choice():
    c3 = ops.Conv2d(1, 1)
    assert c3.algo == "auto"
    big, small = ((32, 128, 8, 8), (128, 128, 3, 3)), ((8, 8, 16, 16), (8, 8, 3, 3))
    assert winograd.chosen(c3, *big, np.float32)
    assert winograd.chosen(c3, (32, 16, 32, 32), (16, 16, 3, 3), np.float32)  # ResNet's
    assert not winograd.chosen(c3, *small, np.float32)  # too few channels to pay
    few = ((2, 512, 4, 4), (512, 512, 3, 3))  # 2 tiles per weight transform
    assert not winograd.chosen(c3, *few, np.float32)
    # a forward on 32 tiles with 32+ channels (batch 2 at 16x16) takes it; its gradients
    # and a forward with 16 channels do not
    mid = ((2, 128, 16, 16), (32, 128, 3, 3))
    assert winograd.chosen(c3, *mid, np.float32)
    assert not winograd.chosen(ops.Conv2dGradInput(1, 1, x_shape=mid[0]), *mid, np.float32)
    assert not winograd.chosen(c3, (2, 16, 16, 16), (64, 16, 3, 3), np.float32)
    assert winograd.chosen(ops.Conv2d(1, 1, algo="winograd"), *small, np.float32)
    assert not winograd.chosen(ops.Conv2d(1, 1, algo="direct"), *big, np.float32)
    assert not winograd.chosen(c3, *big, np.float16)  # float16 runs on float32 copies
    for attrs in (dict(stride=2, padding=1), dict(padding=2, dilation=2),
                  dict(padding=3), dict(padding=1, groups=2)):
        assert not winograd.chosen(ops.Conv2d(**attrs, algo="winograd"), *big, np.float32)
    assert not winograd.chosen(ops.Conv2d(algo="winograd"), (8, 64, 8, 8), (64, 64, 1, 1),
                               np.float32)
    with pytest.raises(ValueError, match="algo"):
        ops.Conv2d(1, 1, algo="fft")


def test_direct_keeps_im2col_rounding():
    # "direct" is the im2col + GEMM kernel, bit for bit, the input gradient too
    x = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    y = _run(ops.Conv2d(1, 1, algo="direct"), [x, w], (2, 16, 8, 8), np.float32)
    cols = np.stack([np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))[:, :, i:i + 8, j:j + 8]
                     for i in range(3) for j in range(3)], 2).reshape(2, 144, 64)
    np.testing.assert_allclose(y.reshape(2, 16, 64), w.reshape(16, 144) @ cols, rtol=1e-5,
                               atol=1e-5)
    wino = _run(ops.Conv2d(1, 1, algo="winograd"), [x, w], (2, 16, 8, 8), np.float32)
    assert not np.array_equal(y, wino)  # a different rounding, so a real choice
    layer_y = eager(lambda a, b: ops.conv2d(a, b, padding=1, algo="direct"), x, w)
    np.testing.assert_array_equal(layer_y, y)


def test_float64_always_runs_im2col():
    # a float64 conv is run for its accuracy: even algo="winograd" gives im2col's bits
    big = ((8, 64, 32, 32), (64, 64, 3, 3))
    for algo in ("auto", "winograd"):
        assert not winograd.chosen(ops.Conv2d(1, 1, algo=algo), *big, np.float64)
        gw = ops.Conv2dGradWeight(1, 1, w_shape=big[1], algo=algo)
        assert not winograd.chosen(gw, *big, np.float64)
    x = rng.standard_normal((2, 16, 8, 8))
    w = rng.standard_normal((16, 16, 3, 3))
    y = _run(ops.Conv2d(1, 1, algo="winograd"), [x, w], (2, 16, 8, 8), np.float64)
    np.testing.assert_array_equal(y, _run(ops.Conv2d(1, 1, algo="direct"), [x, w],
                                          (2, 16, 8, 8), np.float64))


@pytest.mark.parametrize("algo", ["auto", "winograd"])
def test_graph_matches_eager(algo):
    x = rng.standard_normal((3, 16, 9, 10)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    graph_matches_eager(lambda a, c, d: ops.relu(ops.conv2d(a, c, d, padding=1, algo=algo)),
                        x, w, b)


def test_workspace_is_planned():
    # the kernel takes all its scratch from the workspace it is given
    x = rng.standard_normal((4, 16, 12, 12)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    op = ops.Conv2d(1, 1, algo="winograd")
    y = np.empty((4, 32, 12, 12), np.float32)
    need = workspace_bytes(op, [x, w], [y])
    assert need == winograd.forward_workspace(op, [x, w], [y])
    with pytest.raises(ValueError, match="workspace"):
        bind(op, [x, w], [y], ws=np.empty(need - 64, np.uint8))
