import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import singa_graph as sg
from singa_graph import ops
from singa_graph.runtime.kernels.cpu import conv as conv_kernels
from singa_graph.runtime.kernels.cpu import conv_loops
from singa_graph.runtime.registry import bind, workspace_bytes
from helpers import check_grad, eager

rng = np.random.default_rng(2)


def onnx_conv(x, w, b, stride, pads, dilation, groups):
    """One-node ONNX Conv model run by onnx's reference evaluator (the independent oracle)."""
    names = ["x", "w"] + ([] if b is None else ["b"])
    node = helper.make_node("Conv", names, ["y"], strides=list(stride), pads=list(pads),
                            dilations=list(dilation), group=groups)
    feeds = dict(zip(names, [x, w] + ([] if b is None else [b])))
    return ReferenceEvaluator(node).run(None, feeds)[0]


# (C, O, groups, kernel, stride, padding, dilation, H, W)
CASES = [
    (3, 4, 1, (3, 3), 1, 0, 1, 6, 5),
    (4, 6, 1, (3, 3), 1, 1, 1, 5, 5),
    (4, 6, 2, (3, 2), (2, 1), (1, 0), (2, 1), 7, 6),  # strided, padded, dilated, grouped
    (4, 4, 4, (3, 3), 2, 1, 1, 7, 7),                  # depthwise
    (4, 8, 4, (3, 3), 1, 2, 2, 5, 6),                  # depthwise x2 multiplier, dilated
    (4, 6, 1, (1, 1), 1, 0, 1, 5, 4),                  # pointwise fast path
    (4, 6, 2, (1, 1), 1, 0, 1, 3, 3),                  # grouped pointwise
    (3, 2, 1, (1, 1), 2, 0, 1, 5, 5),                  # 1x1 strided: im2col path
    (2, 3, 1, (2, 3), 1, (0, 1, 1, 2), 1, 4, 5),       # ONNX 4-tuple (asymmetric) pads
    # stride 1 with no more output than input channels per group: the input gradient runs
    # as a transposed (flipped-kernel) forward conv
    (6, 4, 1, (3, 3), 1, 1, 1, 5, 5),
    (4, 4, 4, (3, 3), 1, 2, 2, 6, 6),                  # depthwise, dilated
    (4, 2, 2, (2, 3), 1, (0, 1, 1, 2), (2, 1), 5, 5),  # grouped, asymmetric pads, dilated
]


def _pads(p):
    if isinstance(p, int):
        return (p, p, p, p)
    return tuple(p) if len(p) == 4 else (p[0], p[1], p[0], p[1])


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("stack", [0, 1 << 30])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_conv_forward_matches_onnx(case, dtype, stack, monkeypatch):
    # per sample, and with the batch side by side (conv.STACK_COLUMNS: tiny planes, with
    # large weights: conv.STACK_WEIGHT_BYTES)
    monkeypatch.setattr(conv_kernels, "STACK_COLUMNS", stack)
    monkeypatch.setattr(conv_kernels, "STACK_WEIGHT_BYTES", 0)
    c, o, g, k, s, p, d, h, w = case
    x = rng.standard_normal((2, c, h, w)).astype(dtype)
    W = rng.standard_normal((o, c // g) + k).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    ref = onnx_conv(x, W, b, _pair(s), _pads(p), _pair(d), g)
    got = eager(lambda *t: ops.conv2d(*t, stride=s, padding=p, dilation=d, groups=g), x, W, b)
    assert got.dtype == dtype and got.shape == ref.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    nobias = eager(lambda *t: ops.conv2d(*t, stride=s, padding=p, dilation=d, groups=g), x, W)
    np.testing.assert_allclose(nobias, ref - b[:, None, None], rtol=tol, atol=10 * tol)


@pytest.mark.parametrize("stack", [0, 1 << 30])
@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[3], CASES[6], CASES[8], *CASES[9:]])
def test_conv_gradients(case, stack, monkeypatch):
    # the weight gradient per part with partial sums (stack 0) and with the batch side by
    # side in one product (conv.STACK_COLUMNS, taken for tiny planes)
    monkeypatch.setattr(conv_kernels, "STACK_COLUMNS", stack)
    c, o, g, k, s, p, d, h, w = case
    h, w = min(h, 5), min(w, 5)
    x = rng.standard_normal((2, c, h, w))
    W = rng.standard_normal((o, c // g) + k)
    b = rng.standard_normal(o)
    check_grad(lambda *t: ops.conv2d(*t, stride=s, padding=p, dilation=d, groups=g), x, W, b)


def test_conv_grad_ops_are_differentiable():
    # second order: the grad ops' own gradients (bilinear adjoints)
    x, W = rng.standard_normal((2, 2, 5, 5)), rng.standard_normal((4, 1, 3, 3))
    attrs = dict(stride=2, padding=1, dilation=1, groups=2)
    dy = rng.standard_normal(ops.Conv2d(**attrs).output_shape(x.shape, W.shape))
    check_grad(lambda a, b: ops.Conv2dGradInput(**attrs, x_shape=x.shape)(a, b), dy, W)
    check_grad(lambda a, b: ops.Conv2dGradWeight(**attrs, w_shape=W.shape)(a, b), dy, x)


def _im2col_reference(x, kh, kw, stride, pads, dil, ho, wo):
    """im2col of every sample by padding and slicing in numpy: ``(N, C*kh*kw, Ho*Wo)``."""
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = stride, pads, dil
    n, c, h, w = x.shape
    xp = np.zeros((n, c, h + pt + pb + sh * ho, w + pl + pr + sw * wo), x.dtype)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    cols = np.empty((n, c, kh, kw, ho, wo), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh:i * dh + sh * ho:sh, j * dw:j * dw + sw * wo:sw]
    return cols.reshape(n, c * kh * kw, ho * wo)


# (C, H, W, kernel, stride, pads (t, l, b, r), dilation): the first five take the shifted
# stride-1 path (output as wide as the input), the others the row-by-row one
IM2COL = [
    (3, 5, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (2, 6, 5, (3, 3), (1, 1), (0, 1, 0, 1), (1, 1)),       # no vertical padding: Ho < H
    (2, 4, 7, (2, 5), (1, 1), (3, 2, 0, 2), (1, 1)),       # a tap row entirely in padding
    (1, 6, 6, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),       # dilated
    (2, 1, 3, (5, 1), (1, 1), (2, 0, 2, 0), (1, 1)),       # taps entirely in padding
    (2, 7, 7, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    (3, 6, 5, (3, 2), (2, 1), (1, 0, 0, 1), (2, 1)),
    (2, 5, 5, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    (2, 3, 4, (3, 3), (1, 2), (2, 3, 2, 3), (1, 1)),       # more padding than input columns
    # stride 2 across, output rows of 12 and more: float32 rows are read as 64-bit pairs
    # (odd and even starts; x of an odd size, whose last element is beyond the last pair)
    (2, 9, 25, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    (3, 13, 29, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    (2, 12, 32, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),
    (1, 9, 25, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    (2, 10, 31, (3, 3), (2, 2), (0, 1, 1, 0), (2, 2)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", IM2COL)
def test_im2col_and_col2im_match_references(case, dtype):
    c, h, w, (kh, kw), stride, pads, dil = case
    ho = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    x = rng.standard_normal((3, c, h, w)).astype(dtype)  # 3 samples: an odd size
    ref = _im2col_reference(x, kh, kw, stride, pads, dil, ho, wo)
    geo = (kh, kw, *stride, pads[0], pads[1], *dil)
    x3 = x.reshape(3, c, h * w)
    cols = np.full((c * kh * kw, ho * wo), np.nan, dtype)
    for n in range(3):
        conv_loops.im2col(x, x3, n, cols, geo, ho, wo)
        np.testing.assert_array_equal(cols, ref[n])
        if dtype == np.float32:
            continue
        # col2im is im2col's adjoint: <im2col(x), g> == <x, col2im(g)>
        g = rng.standard_normal(cols.shape)
        dx = np.full(x.shape, np.nan)
        conv_loops.col2im(g, dx, n, geo, ho, wo)
        np.testing.assert_allclose(np.sum(dx[n] * x[n]), np.sum(g * ref[n]), rtol=1e-12)


@pytest.mark.parametrize("k,p", [(3, 1), (1, 0)])
def test_conv_step_reads_live_buffers(k, p):
    # compiled plans build the step once and refill the arrays: the step must not hold copies
    op = ops.Conv2d(1, p)
    x, W = rng.standard_normal((2, 3, 4, 4)), rng.standard_normal((5, 3, k, k))
    y = np.empty(op.output_shape(x.shape, W.shape))
    ws = np.empty(workspace_bytes(op, [x, W], [y]), np.uint8)
    step = bind(op, [x, W], [y], ws=ws)
    x[...] = rng.standard_normal(x.shape)
    W[...] = rng.standard_normal(W.shape)
    step()
    np.testing.assert_allclose(y, onnx_conv(x, W, None, (1, 1), (p,) * 4, (1, 1), 1), atol=1e-12)


def test_conv_shape_errors():
    x = sg.Placeholder((2, 4, 5, 5))
    with pytest.raises(sg.ShapeError, match=r"Conv2d .*\(2, 4, 5, 5\).*\(6, 3, 3, 3\)"):
        ops.conv2d(x, sg.Placeholder((6, 3, 3, 3)))
    with pytest.raises(sg.ShapeError, match=r"Conv2d .*groups=2"):
        ops.conv2d(x, sg.Placeholder((5, 2, 3, 3)), groups=2)
    with pytest.raises(sg.ShapeError, match=r"Conv2d .*larger than input \(2, 4, 5, 5\)"):
        ops.conv2d(x, sg.Placeholder((6, 4, 7, 7)), padding=0)
    with pytest.raises(sg.ShapeError, match=r"Conv2d .*bias \(5,\)"):
        ops.conv2d(x, sg.Placeholder((6, 4, 3, 3)), sg.Placeholder((5,)))
    with pytest.raises(sg.ShapeError, match="stride"):
        ops.Conv2d(stride=0)


def test_conv_graph_mode_shapes():
    y = ops.conv2d(sg.Placeholder((8, 3, 32, 32)), sg.Placeholder((16, 3, 3, 3)), stride=2,
                   padding=1)
    assert y.shape == (8, 16, 16, 16) and not y.is_concrete


def test_conv_batch_parts_match_one_part(monkeypatch):
    # the batch is split into one part per thread; any split gives the same result
    x, W = rng.standard_normal((5, 4, 6, 5)), rng.standard_normal((6, 2, 3, 3))
    attrs = dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    dy = rng.standard_normal(ops.Conv2d(**attrs).output_shape(x.shape, W.shape))
    fns = [lambda a, b: ops.conv2d(a, b, **attrs),
           lambda a, b: ops.Conv2dGradInput(**attrs, x_shape=x.shape)(a, b),
           lambda a, b: ops.Conv2dGradWeight(**attrs, w_shape=W.shape)(a, b)]
    args = [(x, W), (dy, W), (dy, x)]
    monkeypatch.setattr(conv_kernels.threads, "num_threads", lambda: 1)
    want = [eager(f, *a) for f, a in zip(fns, args)]
    monkeypatch.setattr(conv_kernels.threads, "num_threads", lambda: 3)
    for f, a, r in zip(fns, args, want):
        np.testing.assert_allclose(eager(f, *a), r, rtol=1e-13, atol=1e-13)


def test_conv_float16_runs_on_float32_copies():
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float16)
    W = rng.standard_normal((4, 3, 3, 3)).astype(np.float16)
    f = lambda a, b: ops.conv2d(a, b, padding=1)  # noqa: E731
    got = eager(f, x, W)
    ref = onnx_conv(x.astype(np.float32), W.astype(np.float32), None, (1, 1), (1,) * 4, (1, 1), 1)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)
    dy = rng.standard_normal(got.shape).astype(np.float16)
    attrs = dict(stride=1, padding=1, dilation=1, groups=1)
    for op, args in [(ops.Conv2dGradInput(**attrs, x_shape=x.shape), (dy, W)),
                     (ops.Conv2dGradWeight(**attrs, w_shape=W.shape), (dy, x))]:
        g16, g32 = eager(op, *args), eager(op, *(a.astype(np.float32) for a in args))
        assert g16.dtype == np.float16
        np.testing.assert_allclose(g16, g32, rtol=2e-3, atol=2e-2)
