"""Winograd F(4x4, 3x3) convolution for stride-1, undilated, ungrouped 3x3 convs.

A 3x3 conv computes each 4x4 block ("tile") of its output from a 6x6 block of input.
Winograd's minimal filtering algorithm (Lavin & Gray, "Fast Algorithms for Convolutional
Neural Networks", 2016) does it as ``Y = A^T [(G g G^T) * (B^T d B)] A``: the weights and
the input tiles are transformed to 36 "points", the products at each point summed over the
input channels, and the 36 sums transformed back. Summed over channels, the products at
one point ``p`` are a matrix product ``M_p (T x O) = V_p (T x C) @ U_p (C x O)`` over the
``T`` tiles, so the multiplications run as 36 BLAS GEMMs (:func:`.blas.gemm`) that do
9*16/36 = 4x fewer multiply-adds than im2col + GEMM. The transforms (winograd_transforms.py)
are a few additions per element, vectorised over blocks of channels.

Rounding: the transforms multiply by up to 8 (A) and 5 (B) and divide by 6 and 24 (G), so
the result is not the one im2col + GEMM rounds to. Measured against a float64 reference,
the error of every output element stays below ``ERROR_BOUND * eps * (|x| conv |w|)`` (the
convolution of the absolute values, ``eps`` the dtype's machine epsilon), that is about
``1e-5`` relative in float32, over shapes with odd sizes, every padding 0..2 and 1..96
channels (tests/runtime/test_winograd.py). Conv ops take ``algo="direct"`` for im2col's
rounding. float64 convs never take Winograd, whatever ``algo`` says (they run im2col + GEMM
or the direct tiles, conv_direct.py): a float64 model is run for its accuracy (gradient
checks, reference runs), which Winograd gives up for speed, and the float64 copies of
these kernels were among the slowest of the package to compile (about 100 s a cache).

Workspace (all planned, see conv.py): the transformed weights ``U`` ``(36, C, O)``, and per
part of the batch (one thread each) the transformed input ``V`` ``(36, Tc, C)``, the
products ``M`` ``(36, Tc, O)`` and three small row buffers; ``Tc`` is the tiles of a chunk
of samples, sized so that ``V`` and ``M`` stay in L2 while the GEMMs reread them.
"""
import numpy as np
from numba import njit, prange, uintp

from ....runtime import threads
from ...registry import carve, carved_bytes
from . import blas
from .blas import gemm
from .epilogue import NONE, RELU, act_args, act_code, conv_epilogue
from .winograd_transforms import BLOCK, input_tiles, output_tiles

ERROR_BOUND = 64  # times eps times the |x| conv |w| bound; see the tests
_CHUNK_BYTES = 1 << 20  # V + M of one chunk: well inside a 2 MiB share of L2


def applies(op, x_shape, w_shape) -> bool:
    """Whether the Winograd kernel computes this conv: 3x3, stride 1, dilation 1, one
    group, and every side padded by at most 2 (the output has at least one full tap)."""
    return (tuple(w_shape[2:]) == (3, 3) and op.stride == (1, 1) and op.dilation == (1, 1)
            and op.groups == 1 and max(op.padding) <= 2 and len(x_shape) == 4)


def _pitch(n, itemsize):
    """Elements from one point's plane of ``V`` or ``M`` to the next: more than ``n``, an
    odd number of cache lines. The transforms read or write six planes at once; planes a
    multiple of 4 KiB apart share an L1 set and evicted each other (3x slower). Never ``n``
    itself: the planes' 4-d views (:func:`_planes`) are then never contiguous, so Numba
    compiles the kernels for one layout of them, not for both (each compile 10-12 s)."""
    lines = n * itemsize // 64 + 1
    return (lines | 1) * 64 // itemsize


class Geometry:
    """Tiles and workspace of one Winograd conv: ``x (N, C, H, W)`` to ``y (N, O, Ho, Wo)``
    with ``parts`` threads."""

    def __init__(self, x_shape, o, y_shape, padding, parts, dtype):
        self.n, self.c, self.h, self.w = (int(s) for s in x_shape)
        self.o = int(o)
        self.ho, self.wo = int(y_shape[2]), int(y_shape[3])
        self.pt, self.pl = int(padding[0]), int(padding[1])
        self.th, self.tw = -(-self.ho // 4), -(-self.wo // 4)
        self.parts = max(1, min(int(parts), self.n))
        self.dtype = np.dtype(dtype)
        per_sample = self.th * self.tw * 36 * (self.c + self.o) * self.dtype.itemsize
        per_part = -(-self.n // self.parts)
        self.chunk = max(1, min(per_part, _CHUNK_BYTES // per_sample))
        self.tc = self.chunk * self.th * self.tw
        size = self.dtype.itemsize
        self.vpitch = _pitch(self.c * self.tc, size)
        self.mpitch = _pitch(self.o * self.tc, size)

    def specs(self):
        """``(shape, dtype)`` of ``U``, ``V``, ``M``, the row buffers and the weight
        transform's float64 scratch."""
        zw = 4 * self.tw + 2
        dt = self.dtype
        return [((36, self.c, self.o), dt), ((self.parts, 36 * self.vpitch), dt),
                ((self.parts, 36 * self.mpitch), dt), ((self.parts, 2, 6 * zw * BLOCK), dt),
                ((self.parts, 24 * BLOCK), dt), ((self.parts, 16 * self.tw * BLOCK), dt),
                ((self.parts, 27, self.o), np.float64)]


# ------------------------------------------------------------------ weight transform
@njit(cache=True, nogil=True)
def _weights(w, u, gw, flip, lo, hi):
    """``u[:, c, o] = G g G^T`` for output channels ``o`` in ``[lo, hi)``, computed in
    float64 (scratch ``gw``, ``(27, O)``) and rounded once. ``g = w[o, c]``, or with
    ``flip`` the kernel of the input gradient, ``w[c, o]`` rotated by 180 degrees. Every
    loop runs over the part's output channels for one input channel, so that LLVM
    vectorises it and every store lands next to the last: with the input channels
    innermost, each store went ``O`` values past the last, and 64 -> 64 took 365 us a
    call, 512 -> 512 34 ms (u 38 MB; two threads, 2026-12-02)."""
    ci = u.shape[1]
    # unsigned indices: no negative-index wrap-around in the way of vectorising
    ulo, uhi = uintp(lo), uintp(hi)
    for c in range(ci):
        for o in range(ulo, uhi):  # gw[i*3 + j, o] = g[i, j]
            for i in range(3):
                for j in range(3):
                    gw[i * 3 + j, o] = w[c, o, 2 - i, 2 - j] if flip else w[o, c, i, j]
        for j in range(3):  # gw[9 + a*3 + j] = (G g)[a, j] for a in 1..4
            g0, g1, g2, t = gw[j], gw[3 + j], gw[6 + j], gw[9 + j]
            for o in range(ulo, uhi):
                t[o] = (g0[o] + g1[o] + g2[o]) * (-1.0 / 6.0)
            t = gw[12 + j]
            for o in range(ulo, uhi):
                t[o] = (g0[o] - g1[o] + g2[o]) * (-1.0 / 6.0)
            t = gw[15 + j]
            for o in range(ulo, uhi):
                t[o] = g0[o] * (1.0 / 24.0) + g1[o] * (1.0 / 12.0) + g2[o] * (1.0 / 6.0)
            t = gw[18 + j]
            for o in range(ulo, uhi):
                t[o] = g0[o] * (1.0 / 24.0) - g1[o] * (1.0 / 12.0) + g2[o] * (1.0 / 6.0)
        for a in range(6):  # row a of G g: g[0] / 4, the four above, g[2]
            if a == 0:
                k0, k1, k2, sc = 0, 1, 2, 0.25
            elif a == 5:
                k0, k1, k2, sc = 6, 7, 8, 1.0
            else:
                k0, k1, k2, sc = 9 + (a - 1) * 3, 10 + (a - 1) * 3, 11 + (a - 1) * 3, 1.0
            h0, h1, h2 = gw[k0], gw[k1], gw[k2]
            d = u[a * 6:(a + 1) * 6, c]
            for o in range(ulo, uhi):
                d[0, o] = h0[o] * (0.25 * sc)
            for o in range(ulo, uhi):
                d[1, o] = (h0[o] + h1[o] + h2[o]) * (-sc / 6.0)
            for o in range(ulo, uhi):
                d[2, o] = (h0[o] - h1[o] + h2[o]) * (-sc / 6.0)
            for o in range(ulo, uhi):
                d[3, o] = (h0[o] * (1.0 / 24.0) + h1[o] * (1.0 / 12.0) + h2[o] * (1.0 / 6.0)) * sc
            for o in range(ulo, uhi):
                d[4, o] = (h0[o] * (1.0 / 24.0) - h1[o] * (1.0 / 12.0) + h2[o] * (1.0 / 6.0)) * sc
            for o in range(ulo, uhi):
                d[5, o] = h2[o] * sc


@njit(cache=True, nogil=True, parallel=True)
def transform_weights(w, u, gw, flip, parts):
    """``u = G w G^T`` for every (output, input) channel pair, the output channels split
    into ``parts`` slices, one per thread (``gw[t]``: scratch of part ``t``)."""
    o_ = u.shape[2]
    for t in prange(parts):
        _weights(w, u, gw[t], flip, t * o_ // parts, (t + 1) * o_ // parts)


# ------------------------------------------------------------------ driver
@njit(cache=True, nogil=True, parallel=True)
def convolve(x, u, y, vf, v4, mf, m4, buf, sb, yb, bias, has_bias, relu, pt, pl, th, tw,
             chunk, parts, bl):
    """``y = conv3x3(x) (+ bias) (then ReLU)`` from the transformed weights ``u``: each
    part takes its samples ``chunk`` at a time, transforms their input into ``V`` (flat
    ``vf[t]``, as ``(tiles, C)`` matrices ``v4[t, p]``), runs the 36 point GEMMs
    ``M_p = V_p U_p`` into ``M`` (``m4``, ``mf``) and transforms those into ``y``."""
    n_ = x.shape[0]
    per = th * tw
    vp, mp = v4.strides[1] // v4.itemsize, m4.strides[1] // m4.itemsize
    for t in prange(parts):
        lo, hi = t * n_ // parts, (t + 1) * n_ // parts
        for n0 in range(lo, hi, chunk):
            n1 = min(n0 + chunk, hi)
            for n in range(n0, n1):
                input_tiles(x, n, vf[t], vp, (n - n0) * per, pt, pl, th, tw, buf[t])
            tt = (n1 - n0) * per
            for p in range(36):
                gemm(v4[t, p, :tt], u[p], m4[t, p, :tt], 0.0, bl)
            for n in range(n0, n1):
                output_tiles(mf[t], mp, y, n, (n - n0) * per, th, tw, sb[t], yb[t], bias,
                             has_bias, relu)


# ------------------------------------------------------------------ kernels
def chosen(op, x_shape, w_shape, dtype) -> bool:
    """Whether the conv ``op`` (a Conv2d, or a Conv2dGradInput with its forward's shapes)
    runs on this kernel: float32 only (see the module's docstring), with
    ``algo="winograd"`` where it applies, ``"auto"`` where it applies and the channels are
    many enough for the GEMMs to pay (see bench/conv.py), never with ``"direct"``. It
    depends on the op, shapes and dtype only, so graph and eager runs choose alike."""
    algo = getattr(op, "algo", "auto")
    if algo == "direct" or np.dtype(dtype) != np.float32:
        return False
    if not applies(op, x_shape, w_shape):
        return False
    if algo == "winograd":
        return True
    channels, n_tiles = min(w_shape[0], w_shape[1]), tiles(op, x_shape)
    if op.type == "Conv2d" and channels >= FORWARD_MIN_CHANNELS and \
            n_tiles >= FORWARD_MIN_TILES:
        return True
    return channels >= AUTO_MIN_CHANNELS and n_tiles >= AUTO_MIN_TILES


def tiles(op, x_shape) -> int:
    """The 4x4 output tiles of a batch: how many times one weight transform is used."""
    pt, pl, pb, pr = op.padding
    ho, wo = x_shape[2] + pt + pb - 2, x_shape[3] + pl + pr - 2
    return x_shape[0] * (-(-ho // 4)) * (-(-wo // 4))


# "auto" takes Winograd from this many input and output channels. Measured on the 2-core
# AVX-512 machine, batch 32, one thread, the fastest of 40 calls (the machine was loaded):
# with the channel-blocked transforms, 16x16 at 32x32 1.7 ms against im2col's 2.6, 32x32 at
# 16x16 1.0 against 2.1, 64x64 at 8x8 0.9 against 2.1. Below 16 channels a vector block
# is mostly empty lanes, so those keep im2col's rounding.
AUTO_MIN_CHANNELS = 16
# ... and from this many output tiles per weight transform: the weights are transformed every
# step (O*C*36 products), which small batches or small planes do not repay. torchvision's
# resnet18 at batch 2, 64x64 (2..8 tiles per conv) ran 4.6x slower with Winograd than with
# im2col; batch 32 at 8x8 (128 tiles) was the smallest case measured faster.
AUTO_MIN_TILES = 128
# A forward conv also takes Winograd from this many tiles when it has this many channels:
# at batch 2 (two threads, 2026-11-27, im2col + GEMM against Winograd, its weight transform
# included) 16x16 planes (32 tiles) ran 128 -> 32 channels 306 -> 214 us, 64 -> 64 246 ->
# 188, 256 -> 64 894 -> 689, 128 -> 128 837 -> 755, 64 -> 128 and 32 -> 32 even, 64 -> 192
# 577 -> 613; 16 -> 64 at 15x15 54 -> 147 and 8x8 planes (8 tiles) lost. The gradients keep
# the rule above (unmeasured at these sizes).
FORWARD_MIN_CHANNELS, FORWARD_MIN_TILES = 32, 32


def _forward_geometry(op, x_shape, w_shape, y_shape, dtype):
    return Geometry(x_shape, w_shape[0], y_shape, op.padding, threads.num_threads(), dtype)


def _flipped_padding(op):
    pt, pl, pb, pr = op.padding
    return (2 - pt, 2 - pl, 2 - pb, 2 - pr)


def _grad_input_geometry(op, dy_shape, w_shape, dx_shape, dtype):
    return Geometry(dy_shape, w_shape[1], dx_shape, _flipped_padding(op),
                    threads.num_threads(), dtype)


def _planes(flat, tc, cols, pitch):
    """The ``(parts, 36, tc, cols)`` matrices of the point planes in ``flat``, ``pitch``
    elements apart (a view)."""
    isz = flat.itemsize
    return np.lib.stride_tricks.as_strided(
        flat, (flat.shape[0], 36, tc, cols), (flat.strides[0], pitch * isz, cols * isz, isz),
        writeable=True)


def _step(gm, w, x, y, ws, bias, relu, flip):
    u, vf, mf, buf, sb, yb, gw = carve(ws, *gm.specs())
    has_bias = bias is not None
    b = bias if has_bias else u.reshape(-1)[:0]
    args = (x, u, y, vf, _planes(vf, gm.tc, gm.c, gm.vpitch), mf,
            _planes(mf, gm.tc, gm.o, gm.mpitch), buf, sb, yb, b, has_bias, relu, gm.pt, gm.pl,
            gm.th, gm.tw, gm.chunk, gm.parts, blas.HANDLE)

    def step():
        transform_weights(w, u, gw, flip, gm.parts)  # the weights change every step
        convolve(*args)
    return step


def forward_workspace(op, ins, outs) -> int:
    """Workspace bytes of :func:`forward`."""
    x, w = ins[0], ins[1]
    return carved_bytes(*_forward_geometry(op, x.shape, w.shape, outs[0].shape,
                                           outs[0].dtype).specs())


def forward(op, ins, outs, ws):
    """The step of ``y = act(conv(x, w) (+ b) (+ residual))``: a lone ReLU is applied as
    the tiles are written; a residual add or another activation (the inference passes'
    epilogue, :mod:`.epilogue`) runs over the finished output."""
    x, w = ins[0], ins[1]
    (y,) = outs
    has_res = bool(getattr(op, "residual", False))
    has_bias = len(ins) - has_res == 3
    act = act_code(op)
    gm = _forward_geometry(op, x.shape, w.shape, y.shape, y.dtype)
    conv = _step(gm, w, x, y, ws, ins[2] if has_bias else None,
                 act == RELU and not has_res, False)
    if not has_res and act in (NONE, RELU):
        return conv
    rows = (y.shape[0] * y.shape[1], y.shape[2] * y.shape[3])
    y2 = y.reshape(rows)
    res2 = ins[-1].reshape(rows) if has_res else y2
    alpha, beta, k = act_args(op, y.dtype)

    def step():
        conv()
        conv_epilogue(y2, y2[0, :0], False, res2, has_res, act, alpha, beta, k)
    return step


def grad_input_workspace(op, ins, outs) -> int:
    """Workspace bytes of :func:`grad_input`."""
    dy, w = ins
    return carved_bytes(*_grad_input_geometry(op, dy.shape, w.shape, outs[0].shape,
                                              outs[0].dtype).specs())


def grad_input(op, ins, outs, ws):
    """The step of ``dx``: for stride 1, the forward conv of ``dy`` with the kernel rotated
    by 180 degrees, in/out channels swapped and padding ``2 - pad`` (the rotation happens in
    the weight transform)."""
    dy, w = ins
    (dx,) = outs
    gm = _grad_input_geometry(op, dy.shape, w.shape, dx.shape, dx.dtype)
    return _step(gm, w, dy, dx, ws, None, False, True)
