"""Direct depthwise / narrow-group convolution kernels (runtime/kernels/cpu/depthwise.py):
forward, input gradient and weight gradient against PyTorch and a plain numpy reference,
float64 finite differences, graph == eager, and independence from the thread count."""
import numpy as np
import pytest
from numba import njit

from singa_graph import ops
from singa_graph.runtime.kernels.cpu import depthwise, depthwise_loops
from helpers import check_grad, eager, graph_matches_eager

torch = pytest.importorskip("torch")
F = torch.nn.functional
rng = np.random.default_rng(7)

# (N, C, multiplier, H, W, k, stride, pad, dilation): groups == C, O == multiplier * C
DEPTHWISE = [
    (1, 4, 1, 7, 9, 3, 1, 1, 1),
    (2, 3, 1, 8, 8, 3, 2, 1, 1),
    (3, 5, 1, 9, 7, 3, 2, 0, 1),     # odd sizes, unpadded, stride 2
    (2, 4, 1, 6, 6, 3, 1, 2, 2),     # dilated
    (1, 3, 1, 11, 10, 5, 1, 2, 1),
    (2, 2, 1, 9, 9, 5, 2, 2, 1),
    (1, 3, 1, 12, 11, 7, 1, 3, 1),
    (2, 2, 1, 10, 13, 7, 2, 3, 1),
    (2, 3, 2, 6, 5, 3, 1, 1, 1),     # channel multiplier 2
    (1, 2, 3, 7, 7, 5, 2, 1, 1),     # multiplier 3, stride 2, pad smaller than k//2
    (1, 4, 1, 2, 2, 3, 1, 1, 1),     # 2x2 planes (the last blocks of mobilenets)
    (2, 3, 1, 3, 3, 3, 2, 4, 1),     # pad larger than the kernel: rows of zeros
    (1, 2, 1, 5, 5, 3, 1, 3, 1),     # pad > dilation*(k-1): the dx correlation crops
    (2, 3, 1, 10, 9, 3, 2, 1, 2),    # dilated and strided: taps in both column phases
    (1, 2, 1, 11, 10, 3, 3, 1, 1),   # stride 3: nine phases
]


def _torch_all(x, W, b, dy, s, p, d, g):
    tx, tw = (torch.tensor(v, requires_grad=True) for v in (x, W))
    ty = F.conv2d(tx, tw, None if b is None else torch.tensor(b), s, p, d, g)
    ty.backward(torch.tensor(dy))
    return ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()


def _ours_all(x, W, b, dy, s, p, d, g):
    a = dict(stride=s, padding=p, dilation=d, groups=g)
    y = eager(lambda *t: ops.conv2d(*t, **a), *([x, W] if b is None else [x, W, b]))
    dx = eager(lambda u, v: ops.Conv2dGradInput(**a, x_shape=x.shape)(u, v), dy, W)
    dw = eager(lambda u, v: ops.Conv2dGradWeight(**a, w_shape=W.shape)(u, v), dy, x)
    return y, dx, dw


def _case(case, dtype, cg=1):
    n, c, m, h, w, k, s, p, d = case
    g = c // cg
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    W = rng.standard_normal((m * g, cg, k, k)).astype(dtype)
    b = rng.standard_normal(m * g).astype(dtype)
    y = ops.Conv2d(s, p, d, g).output_shape(x.shape, W.shape)
    dy = rng.standard_normal(y).astype(dtype)
    return x, W, b, dy, (s, p, d, g)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", DEPTHWISE)
def test_depthwise_matches_torch(case, dtype):
    x, W, b, dy, a = _case(case, dtype)
    assert depthwise.direct(ops.Conv2d(*a), W.shape)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for bias in (b, None):
        for got, want in zip(_ours_all(x, W, bias, dy, *a), _torch_all(x, W, bias, dy, *a)):
            assert got.dtype == dtype
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)


# kernels larger than the plane: most taps only ever read padding, and the channels-innermost
# kernels move only the taps that read the input (ConvNeXt's 7x7 on 2x2 planes)
TAPS_IN_PADDING = [(2, 20, 1, 2, 2, 7, 1, 3, 1), (1, 17, 1, 3, 2, 7, 2, 3, 1),
                   (2, 18, 1, 1, 3, 5, 1, 2, 1)]


# enough channels that the channels-innermost kernels give every part a range of each
# sample's channels, cut at whole vectors (depthwise_channels_last.SPLIT_CHANNELS)
WIDE = [(2, 150, 1, 6, 6, 5, 1, 2, 1), (3, 136, 1, 5, 4, 3, 2, 1, 1)]


def _force_layout(layout, monkeypatch):
    if layout == "last3":  # three channel ranges a sample, whatever the thread count
        monkeypatch.setattr(depthwise.last, "split_by_channels", lambda c, parts: False)
        monkeypatch.setattr(depthwise.last, "units_of", lambda n, c, parts: min(3, c))
    if layout == "split":  # every sample's channels cut into one range a part
        monkeypatch.setattr(depthwise.last, "split_by_channels", lambda c, parts: True)


@pytest.mark.parametrize("layout", ["last", "last3", "split", "planes"])
@pytest.mark.parametrize("case", [c for c in DEPTHWISE if c[2] == 1] +
                         [(2, 37, 1, 9, 8, 5, 2, 2, 1), (1, 40, 1, 4, 4, 3, 1, 1, 1),
                          (3, 50, 1, 3, 3, 3, 1, 1, 1)] + TAPS_IN_PADDING + WIDE)
def test_depthwise_forward_every_layout_matches_torch(case, layout, monkeypatch):
    # the channels-innermost forward (small planes) and the plane-by-plane one, each
    # forced on every shape, with channel counts that give ranges of unequal widths
    for name in ("LAST_PLANE", "LAST_PLANE_STRIDED"):
        monkeypatch.setattr(depthwise, name, 0 if layout == "planes" else 1 << 30)
    _force_layout(layout, monkeypatch)
    x, W, b, dy, a = _case(case, np.float32)
    for bias in (b, None):
        got = eager(lambda *t: ops.conv2d(*t, stride=a[0], padding=a[1], dilation=a[2],
                                          groups=a[3]), *([x, W] if bias is None else [x, W, bias]))
        want = _torch_all(x, W, bias, dy, *a)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


# the gradients' switches between channels innermost (small planes) and plane by plane:
# the input gradient at stride 1 runs the forward of dy with the kernels flipped, strided
# the forward's adjoint; the weight gradient sums each channel range over the batch
GRADIENT_LAYOUTS = {1: ("LAST_PLANE", "LAST_PLANE_STRIDED_DX"), 2: ("LAST_PLANE_DW",)}


@pytest.mark.parametrize("which", [1, 2], ids=["dx", "dw"])
@pytest.mark.parametrize("layout", ["last", "last3", "split", "planes"])
@pytest.mark.parametrize("case", [c for c in DEPTHWISE if c[2] == 1] +
                         [(2, 37, 1, 4, 4, 5, 1, 2, 1), (3, 50, 1, 3, 3, 3, 1, 1, 1),
                          (2, 37, 1, 9, 8, 5, 2, 2, 1)] + TAPS_IN_PADDING + WIDE)
def test_depthwise_gradients_every_layout_match_torch(case, layout, which, monkeypatch):
    for name in GRADIENT_LAYOUTS[which]:
        monkeypatch.setattr(depthwise, name, 0 if layout == "planes" else 1 << 30)
    _force_layout(layout, monkeypatch)
    x, W, b, dy, a = _case(case, np.float32)
    if which == 1:
        assert depthwise._dx_is_last(ops.Conv2d(*a), W.shape, x) == (layout != "planes")
    got = _ours_all(x, W, None, dy, *a)[which]
    want = _torch_all(x, W, None, dy, *a)[which]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


# (N, C, multiplier, H, W, k, stride, pad, dilation) with C / groups input channels each
GROUPED = [(2, 16, 1, 7, 7, 3, 1, 1, 1), (1, 16, 2, 8, 9, 3, 2, 1, 1),
           (2, 16, 1, 6, 6, 5, 1, 2, 1)]


@pytest.mark.parametrize("cg", [2, 8])
@pytest.mark.parametrize("case", GROUPED)
def test_narrow_groups_on_the_direct_kernels_match_torch(case, cg, monkeypatch):
    monkeypatch.setattr(depthwise, "MAX_GROUP_WIDTH", 8)
    x, W, b, dy, a = _case(case, np.float64, cg)
    assert depthwise.direct(ops.Conv2d(*a), W.shape)
    for got, want in zip(_ours_all(x, W, b, dy, *a), _torch_all(x, W, b, dy, *a)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-11)


def _numpy_depthwise(x, W, s, p, d):
    """Depthwise conv by padding and slicing in plain numpy (groups == C)."""
    n, c, h, w = x.shape
    o, _, kh, kw = W.shape
    m = o // c
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    ho = (h + 2 * p - d * (kh - 1) - 1) // s + 1
    wo = (w + 2 * p - d * (kw - 1) - 1) // s + 1
    y = np.zeros((n, o, ho, wo), x.dtype)
    for oc in range(o):
        for i in range(kh):
            for j in range(kw):
                tap = xp[:, oc // m, i * d:i * d + s * (ho - 1) + 1:s,
                         j * d:j * d + s * (wo - 1) + 1:s]
                y[:, oc] += W[oc, 0, i, j] * tap
    return y


def _numpy_depthwise_grad_weight(dy, x, k, s, p, d):
    """``dW`` of a depthwise conv in plain numpy: each tap's products summed over the
    batch and the output plane (groups == C)."""
    c, m = x.shape[1], dy.shape[1] // x.shape[1]
    ho, wo = dy.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    dw = np.zeros((dy.shape[1], 1, k, k))
    for oc in range(dy.shape[1]):
        for i in range(k):
            for j in range(k):
                tap = xp[:, oc // m, i * d:i * d + s * (ho - 1) + 1:s,
                         j * d:j * d + s * (wo - 1) + 1:s]
                dw[oc, 0, i, j] = (dy[:, oc] * tap).sum()
    return dw


# the plane-by-plane weight gradient's dot products: 3x3 in one pass, 5- and 7-wide rows,
# any other kernel tap by tap (2, 4), strided, dilated, with a channel multiplier
@pytest.mark.parametrize("case", [(2, 3, 1, 9, 8, 3, 1, 1, 2), (2, 3, 1, 10, 9, 3, 2, 1, 1),
                                  (1, 2, 2, 11, 10, 5, 2, 2, 1), (2, 2, 1, 9, 12, 7, 1, 3, 1),
                                  (2, 3, 1, 8, 7, 4, 2, 1, 1), (1, 4, 1, 6, 7, 2, 1, 0, 1)])
def test_planes_weight_gradient_matches_numpy_in_float64(case, monkeypatch):
    monkeypatch.setattr(depthwise, "LAST_PLANE_DW", 0)
    x, W, _, dy, (s, p, d, g) = _case(case, np.float64)
    got = eager(lambda u, v: ops.Conv2dGradWeight(s, p, d, g, w_shape=W.shape)(u, v), dy, x)
    np.testing.assert_allclose(got, _numpy_depthwise_grad_weight(dy, x, case[5], s, p, d),
                               rtol=1e-12, atol=1e-12)


def _ordered_depthwise(x, W, b, s, p, d, flip=False):
    """The depthwise forward summed as the plane tiles sum it: the bias, then one product
    and one add per tap in row-major order over the zero-padded plane, each rounded to
    the arrays' dtype (numpy's float32 arithmetic is float32). ``b`` may be a whole
    output to start from."""
    n, c, h, w = x.shape
    m, k = W.shape[0] // c, W.shape[2]
    ho, wo = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    xp = np.zeros((n, c, h + 2 * p + s * k * d, w + 2 * p + s * k * d), x.dtype)
    xp[:, :, p:p + h, p:p + w] = x
    xp = np.repeat(xp, m, axis=1)
    start = b if b.ndim == 4 else b[None, :, None, None]
    acc = np.broadcast_to(start, (n, m * c, ho, wo)).astype(x.dtype)
    Wk = W[:, 0, ::-1, ::-1] if flip else W[:, 0]
    for i in range(k):
        for j in range(k):
            tap = xp[:, :, i * d:i * d + s * ho:s, j * d:j * d + s * wo:s]
            acc = acc + Wk[None, :, i, j, None, None] * tap
    return acc


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", [
    (2, 3, 1, 19, 40, 3, 1, 1, 1),   # rows of 40: 2-vector tiles then a 1-vector tail
    (1, 2, 1, 37, 70, 3, 2, 1, 1),   # stride 2: 35 columns, 19 rows
    (1, 2, 1, 20, 50, 5, 3, 2, 1),   # stride 3: the general stride's one-row tiles
    (1, 3, 1, 18, 35, 3, 1, 2, 2),   # dilated
    (1, 2, 1, 16, 16, 7, 1, 3, 1),   # 7x7 on 16x16: one 8-row tile pair per plane
    (2, 2, 2, 17, 9, 5, 2, 2, 1),    # channel multiplier, stride 2
    (2, 2, 3, 13, 20, 3, 1, 1, 1)])  # multiplier 3: the input gradient sums 3 outputs
def test_plane_tiles_sum_in_the_documented_order(case, dtype, monkeypatch):
    """The plane-by-plane forward (simd_plane.plane_tile's 8x1, 4x2 and 1-row tiles, at
    strides 1, 2 and 3) equals a sum in the documented order bit for bit, fused ReLU
    included; so does the stride-1 input gradient, which runs it on ``dy`` with the
    kernels flipped and sums a channel multiplier's outputs in turn."""
    for name in ("LAST_PLANE", "LAST_PLANE_STRIDED"):
        monkeypatch.setattr(depthwise, name, 0)
    x, W, b, _, (s, p, d, g) = _case(case, dtype)
    want = _ordered_depthwise(x, W, b, s, p, d)
    got = eager(lambda *t: ops.conv2d(*t, stride=s, padding=p, dilation=d, groups=g), x, W, b)
    np.testing.assert_array_equal(got, want)
    relu = eager(lambda *t: ops.Conv2d(s, p, d, g, relu=True)(*t), x, W, b)
    np.testing.assert_array_equal(relu, np.maximum(want, 0))
    if s == 1:
        m = case[2]
        dy = rng.standard_normal(want.shape).astype(dtype)
        dx = eager(lambda u, v: ops.Conv2dGradInput(s, p, d, g, x_shape=x.shape)(u, v), dy, W)
        ordered = np.zeros(x.shape, dtype)
        for k in range(m):  # input channel c reads outputs c*m + k, k = 0, 1, ...
            ordered = _ordered_depthwise(dy[:, k::m], W[k::m], ordered, 1,
                                         d * (case[5] - 1) - p, d, flip=True)
        np.testing.assert_array_equal(dx, ordered)


@pytest.mark.parametrize("case", DEPTHWISE[:6] + DEPTHWISE[8:10])
def test_depthwise_forward_matches_numpy(case):
    x, W, _, _, (s, p, d, g) = _case(case, np.float64)
    got = eager(lambda *t: ops.conv2d(*t, stride=s, padding=p, dilation=d, groups=g), x, W)
    np.testing.assert_allclose(got, _numpy_depthwise(x, W, s, p, d), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", [DEPTHWISE[0], DEPTHWISE[2], DEPTHWISE[3], DEPTHWISE[9],
                                  DEPTHWISE[11]])
def test_depthwise_gradients(case):
    n, c, m, h, w, k, s, p, d = case
    x, W, b, _, (s, p, d, g) = _case((min(n, 2), c, m, min(h, 6), min(w, 6), k, s, p, d),
                                     np.float64)
    check_grad(lambda *t: ops.conv2d(*t, stride=s, padding=p, dilation=d, groups=g), x, W, b)


def test_depthwise_grad_ops_are_differentiable():
    x, W, _, dy, a = _case((2, 3, 2, 5, 5, 3, 2, 1, 1), np.float64)
    attrs = dict(zip(("stride", "padding", "dilation", "groups"), a))
    check_grad(lambda u, v: ops.Conv2dGradInput(**attrs, x_shape=x.shape)(u, v), dy, W)
    check_grad(lambda u, v: ops.Conv2dGradWeight(**attrs, w_shape=W.shape)(u, v), dy, x)


@pytest.mark.parametrize("case", [DEPTHWISE[1], DEPTHWISE[8]])
def test_depthwise_graph_matches_eager(case):
    x, W, b, _, (s, p, d, g) = _case(case, np.float32)
    graph_matches_eager(lambda *t: ops.conv2d(*t, stride=s, padding=p, dilation=d, groups=g),
                        x, W, b)


def test_depthwise_results_do_not_depend_on_thread_count(monkeypatch):
    x, W, b, dy, a = _case((3, 5, 2, 7, 6, 3, 1, 1, 1), np.float32)
    monkeypatch.setattr(depthwise.threads, "num_threads", lambda: 1)
    one = _ours_all(x, W, b, dy, *a)
    monkeypatch.setattr(depthwise.threads, "num_threads", lambda: 3)
    for got, want in zip(_ours_all(x, W, b, dy, *a), one):
        np.testing.assert_array_equal(got, want)


def test_unequal_strides_and_wide_groups_keep_im2col():
    assert not depthwise.direct(ops.Conv2d((2, 1), 1, 1, 4), (4, 1, 3, 3))
    assert not depthwise.direct(ops.Conv2d(1, 1, 1, 2), (8, 16, 3, 3))
    assert not depthwise.direct(ops.Conv2d(1, 1, 1, 1), (8, 1, 3, 3))


@pytest.mark.parametrize("case", [(1, 70, 1, 4, 4, 3, 1, 1, 1), (2, 150, 1, 6, 6, 5, 1, 2, 1)])
def test_channels_last_forward_does_not_depend_on_thread_count(case, monkeypatch):
    # the channel ranges per sample follow the thread count (150 channels: cut at whole
    # vectors on 2 threads, by samples on 5); each output's sum does not
    x, W, b, _, a = _case(case, np.float32)
    assert depthwise._is_last(ops.Conv2d(*a), W.shape, x)  # y is shaped like x here
    outs = []
    for n in (1, 2, 5):
        monkeypatch.setattr(depthwise.threads, "num_threads", lambda n=n: n)
        outs.append(eager(lambda *t: ops.conv2d(*t, stride=a[0], padding=a[1], dilation=a[2],
                                                groups=a[3]), x, W, b))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


@njit(cache=True)
def _fill_phases(pad, src, base, h, w, hq, wq, s, p):
    # one compiled function for every geometry (a closure over them compiled one each)
    pad[:] = 0
    depthwise_loops.fill_phases(pad, src, base, h, w, hq, wq, s, p, p)


@pytest.mark.parametrize("start", [0, 1], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("geo", [(3, 2, 1, 1, 8, 8), (3, 2, 1, 1, 7, 9), (5, 2, 2, 1, 6, 5),
                                 (3, 2, 0, 1, 9, 7), (3, 3, 1, 1, 11, 10), (3, 2, 1, 2, 10, 9),
                                 (3, 2, 4, 1, 3, 3), (3, 1, 1, 1, 5, 6), (3, 3, 0, 1, 10, 10),
                                 # rows of whole vectors, one partial vector overlapping the
                                 # one before it, an odd last element (AVX-512 and AVX2)
                                 (3, 2, 1, 1, 3, 16), (3, 2, 1, 1, 3, 17), (3, 2, 1, 1, 2, 33),
                                 (3, 2, 1, 1, 2, 64), (7, 2, 3, 1, 2, 65), (3, 2, 0, 1, 3, 47),
                                 (3, 1, 1, 1, 3, 8), (3, 1, 1, 1, 3, 9), (3, 1, 1, 1, 2, 17),
                                 (3, 1, 1, 1, 2, 31), (3, 1, 0, 1, 3, 40)])
def test_phase_planes_of_a_padded_plane(geo, start):
    """The strided forward's phase planes (depthwise_loops.fill_phases: at stride 2 each
    row's vectors shuffled into their even and odd lanes, from an aligned source and a
    misaligned one) against numpy's slices of the padded plane, the padding's zeros
    included."""
    k, s, p, d, h, w = geo
    ho, wo = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    hq, wq, _ = depthwise_loops.phases(k, k, s, d, d, ho, wo)
    planes = 3
    buf = rng.standard_normal(start + planes * h * w + 1).astype(np.float32)
    src = buf[start:start + planes * h * w]

    padded = np.zeros((s * hq + h + 2 * p, s * wq + w + 2 * p), np.float32)
    for plane in range(planes):
        pad = np.full(s * s * hq * wq, np.nan, np.float32)
        _fill_phases(pad, src, plane * h * w, h, w, hq, wq, s, p)
        padded[:] = 0
        padded[p:p + h, p:p + w] = src[plane * h * w:(plane + 1) * h * w].reshape(h, w)
        want = np.stack([padded[a::s, b::s][:hq, :wq] for a in range(s) for b in range(s)])
        np.testing.assert_array_equal(pad.reshape(want.shape), want)
