"""Dense convolutions over few input channels (an image's three: every CNN's stem), and on
processors with AVX-512 stride-2 convolutions whose output rows are whole vectors and
stride-1 ones of few channels onto whole pairs of vectors (:func:`whole_rows`; also the
input gradients of those, as the forward conv of the flipped kernel), on tiles along the
NCHW output rows.

The other kernels spend their fixed costs well only where each output sums many terms:
im2col copies the input ``kh*kw`` times for a GEMM of ``C*kh*kw = 27`` rows, and
conv_direct.py's tiles of pixels by output channels transpose every output into NCHW after
27 or 147 multiply-adds. Here a part copies its sample's ``C`` planes once, zero-padded and
split into their stride phases (depthwise_loops.fill_phases: every tap then reads a
contiguous run, as at stride 1), and :func:`.simd_plane.channel_tile` sums 4 output
channels by 2 output rows by up to two vectors of columns in registers, over every channel
and tap, storing them in place. The conv epilogue (bias, residual, activation) runs on each
block of 4 output planes while they are in cache.

Every output is one chain of fused multiply-adds from zero in ``(c, i, j)`` order, whatever
the tile and the thread: graph and eager runs, which both choose by shapes alone
(:func:`chosen`), agree bit for bit. Parts split the ``(sample, block of 4 output
channels)`` pairs; each holds one sample's phase planes (``C*s*s*Hq*Wq`` values) in its
slice of planned workspace.
"""
import numpy as np
from numba import int64, njit, prange

from .... import host
from ....ops._util import tiled
from ....ops.conv_tiles import on_planes, stem_on_tiles
from ....runtime import threads
from ...registry import carve, carved_bytes
from .depthwise_loops import fill_phases, phase_planes, phases
from .epilogue import conv_epilogue, epilogue_args
from .loops import batch_parts, bound
from . import simd
from .simd_plane import channel_tile

#: a full tile: output channels by output rows (by two vectors of columns). Batch 2, two
#: threads (2026-11-28), against 8 channels of one row: at 224x224 input 3 -> 64 3x3 stride
#: 2 0.92x and 7x7 0.94x, at 64x64 even; 8 channels by 2 rows (32 sums) spilled: 1.15-1.6x.
#: AVX2's 16 registers hold the sums of one row
BLOCK, ROWS = 4, (2 if simd.REGISTERS >= 32 else 1)


def chosen(op, x_shape, w_shape, y_shape, dtype) -> bool:
    """Whether the plain Conv2d ``op`` runs here: a 2-d float32 conv (float64 ones run
    im2col + GEMM: :func:`~singa_graph.ops._util.tiled`) that
    :func:`~singa_graph.ops.conv_tiles.on_planes` gives these tiles, but for the stems
    that :func:`~singa_graph.ops.conv_tiles.stem_on_tiles` gives the register tiles, or a
    conv that :func:`whole_rows` takes. Shapes, dtype and the host's vector width alone
    decide, so graph and eager runs choose alike."""
    if not (len(x_shape) == 4 and len(w_shape) == 4 and tiled(dtype)
            and getattr(op, "algo", "auto") == "auto"):
        return False
    if on_planes(op, w_shape):
        return not stem_on_tiles(op, w_shape, y_shape)
    return whole_rows(op, w_shape, y_shape, dtype)


def whole_rows(op, w_shape, y_shape, dtype) -> bool:
    """Whether a conv of more channels than :func:`~singa_graph.ops.conv_tiles.on_planes`
    takes runs here: a stride-1 conv of few channels onto whole pairs of vectors
    (:data:`FEW_CHANNELS`), or a stride-2 conv onto whole vectors, whatever its channels.
    At stride 2 conv_direct.py's tiles of pixels by output channels gather every other input
    pixel and transpose their sums into planes, where these tiles read each tap's row of
    the phase planes as vectors and store their sums in place. Two threads, AMD EPYC with
    AVX-512 (2026-11-29), against the register tiles: 16 -> 32 at 32x32, batch 32, 625 ->
    478 us (oneDNN 446); 64 -> 128 at 32x32, batch 8, 1622 -> 1471; 32 -> 64 at 64x64
    1828 -> 1496; 16 -> 16 at 32x32 103 -> 72. Rows of part of a vector lose: 16x16 to 8x8
    1.6x slower, 28x28 to 14x14 1.15x, 56x56 to 28x28 (a vector and 12) 1.13x. Most of
    that gain was the register tiles' split into one part per thread: with
    :data:`~.loops.PARTS_PER_THREAD` on both sides, the same day, these tiles took 0.97x
    the register tiles' time for 16 -> 32, 0.96x for 32 -> 64 at 64x64, 1.05x for 64 ->
    128 (even, within this host's noise). Measured with AVX-512's 16 lanes only:
    processors with narrower vectors keep the register tiles."""
    vector = host.vector_bytes()
    lanes = vector // np.dtype(dtype).itemsize
    if vector < 64 or op.groups != 1 or w_shape[2] * w_shape[3] == 1:
        return False
    if op.stride == (2, 2):
        return y_shape[3] % lanes == 0
    return (op.stride == (1, 1) and max(w_shape[0], w_shape[1]) <= FEW_CHANNELS
            and y_shape[3] % (2 * lanes) == 0)


#: stride-1 convs of at most this many input and output channels whose output rows are
#: whole pairs of vectors run here too (:func:`whole_rows`): with so few channels
#: Winograd's transforms cost more than its products save. Two threads, AMD EPYC with
#: AVX-512 (2026-11-29), against what ran them: 16 -> 16 at 32x32, batch 32, 1171-1495 ->
#: 719-781 us (Winograd), batch 2 75 -> 51 (the register tiles), 16 -> 16 at 64x64 227 ->
#: 177, 8 -> 8 at 32x32 168 -> 60, 16 -> 16 5x5 576 -> 468; but 16 -> 64 1.13x slower, 32
#: -> 32 at 16x16 (one vector a row) 3.4x, 64 -> 64 at 32x32 1.8x. With finer parts on
#: both sides (loops.PARTS_PER_THREAD): 16 -> 16 at batch 32 0.96x Winograd's time, at
#: batch 2 0.75x the register tiles'
FEW_CHANNELS = 16


def _plan(op, x_shape, w_shape, y_shape):
    """``(geo, dims, parts, size)``: the geometry ``(kh, kw, s, pt, pl, dh, dw)``, the
    shapes ``(N, C, H, W, O, Ho, Wo)``, the thread parts and one channel's phase planes."""
    (s, _), (pt, pl, _, _), (dh, dw) = op.stride, op.padding, op.dilation  # strides equal
    n, c, h, w = x_shape
    o, kh, kw, ho, wo = w_shape[0], w_shape[2], w_shape[3], y_shape[2], y_shape[3]
    geo = (kh, kw, s, pt, pl, dh, dw)
    hq, wq, _ = phases(kh, kw, s, dh, dw, ho, wo)
    total, nt = n * -(-o // BLOCK), threads.num_threads()
    # a part fills its samples' phase planes itself: finer parts than samples (a batch of
    # 2, 16 blocks of channels on 8 parts) filled them 4 times over, mnasnet0_5 1.08x
    parts = max(min(nt, total), batch_parts(n, nt))
    return geo, (n, c, h, w, o, ho, wo), parts, s * s * hq * wq


def workspace(op, ins, outs):
    """Each part's phase planes of one sample's channels."""
    _, dims, parts, size = _plan(op, ins[0].shape, ins[1].shape, outs[0].shape)
    return carved_bytes(((parts, dims[1] * size), outs[0].dtype))


def forward(op, ins, outs, ws):
    """The step of Conv2d ``op`` (input, OIHW weight[, bias][, residual]) on these tiles."""
    x, w = ins[0], ins[1]
    (y,) = outs
    geo, dims, parts, size = _plan(op, x.shape, w.shape, y.shape)
    (pads,) = carve(ws, ((parts, dims[1] * size), y.dtype))
    n, _, _, _, o, ho, wo = dims
    y3 = y.reshape(n, o, ho * wo)
    return bound(_forward, x.reshape(-1), w.reshape(-1), y.reshape(-1), y3, geo, dims, pads,
                 size, parts, *epilogue_args(op, ins, y3))


@njit(cache=True, nogil=True, parallel=True)
def _forward(x, w, y, y3, geo, dims, pads, size, parts, bias, has_bias, res3, has_res, act,
             alpha, beta, k):
    for t in prange(parts):
        _part(x, w, y, y3, geo, dims, pads, size, parts, bias, has_bias, res3, has_res, act,
              alpha, beta, k, int64(t))


@njit(cache=True, nogil=True)
def _part(x, w, y, y3, geo, dims, pads, size, parts, bias, has_bias, res3, has_res, act,
          alpha, beta, k, t):
    """Part ``t``: its range of ``(sample, block)`` pairs, each sample's planes filled once."""
    kh, kw, s, pt, pl, dh, dw = geo
    n_, c_, h, w_, o_, ho, wo = dims
    hq, wq, _ = phases(kh, kw, s, dh, dw, ho, wo)
    blocks = (o_ + BLOCK - 1) // BLOCK
    total = n_ * blocks
    pad = phase_planes(pads, t, c_ * size)
    filled = -1
    lanes = simd.VECTOR_BYTES // y.itemsize
    taps = kh * kw
    unroll = kh if kh == kw and kh in UNROLLED and dh == dw == 1 and s == 2 else 0
    for p in range(t * total // parts, (t + 1) * total // parts):
        n, b = p // blocks, p % blocks
        if n != filled:
            for c in range(c_):
                fill_phases(pad[c * size:], x, (n * c_ + c) * h * w_, h, w_, hq, wq, s, pt,
                             pl)
            filled = n
        o0 = b * BLOCK
        o1 = min(o_, o0 + BLOCK)
        for c0 in range(0, wo, 2 * lanes):
            nv = min(2, (wo - c0 + lanes - 1) // lanes)
            tail = wo - c0 - (nv - 1) * lanes
            oy = 0
            while oy < ho:
                rows = ROWS if ho - oy >= ROWS else 1
                yo = ((n * o_ + o0) * ho + oy) * wo + c0
                if o1 - o0 == BLOCK:
                    _tile(BLOCK, rows, nv, s, unroll, pad, oy * wq + c0, wq, hq, s, c_, size,
                          kh, kw, dh, dw, w, o0 * c_ * taps, c_ * taps, y, yo, ho * wo, wo, tail)
                else:
                    for r in range(o1 - o0):
                        _tile(1, rows, nv, s, 0, pad, oy * wq + c0, wq, hq, s, c_, size,
                              kh, kw, dh, dw, w, (o0 + r) * c_ * taps, c_ * taps, y,
                              yo + r * ho * wo, ho * wo, wo, tail)
                oy += rows
        conv_epilogue(y3[n, o0:o1], bias[o0:o1] if has_bias else bias, has_bias,
                      res3[n, o0:o1], has_res, act, alpha, beta, k)


_ARGS = "x, xo, xs, hq, s, nc, xc, kh, kw, dh, dw, w, wo, wr, y, yo, ys, yr, tail"
#: the kernel sizes whose taps the stride-2 tiles of 4 channels unroll
#: (simd_plane._unrolled_taps): the stems. Hot, batch 2, two threads, 64x64 input (2-vCPU
#: AMD EPYC, 2026-11-28, with the phases filled in whole vectors): 3x3 3 -> 16 69-75 ->
#: 27-38 us, 3 -> 32 113-140 -> 59-71, 7x7 3 -> 64 548-700 -> 400-527. Each size costs
#: Numba ~5 s more to compile a dtype's forward, once (cached)
UNROLLED = (3, 7)
#: (R, Y, V, S, K) of every tile :func:`_part` calls
_SHAPES = [(r, q, v, st, k) for st in (1, 2) for r in (BLOCK, 1)
           for k in ((0, *UNROLLED) if st == 2 and r == BLOCK else (0,))
           for q in dict.fromkeys((ROWS, 1)) for v in (2, 1)]
_TILES = {shape: channel_tile(*shape) for shape in _SHAPES}


def _dispatch():
    """``_tile(R, Y, V, S, K, *args)``: the tile of that shape. Numba needs each intrinsic
    called by its own name, so the branches are written out here once, from _SHAPES."""
    lines = [f"def _tile(R, Y, V, S, K, {_ARGS}):"]
    for k, (r, q, v, st, kk) in enumerate(_SHAPES):
        cond = f"R == {r} and Y == {q} and V == {v} and S == {st} and K == {kk}"
        lines.append(f"    {'if' if k == 0 else 'elif'} {cond}:\n        _T{k}({_ARGS})")
    env = {f"_T{k}": _TILES[shape] for k, shape in enumerate(_SHAPES)}
    exec("\n".join(lines), env)
    return njit(nogil=True, inline="always")(env["_tile"])


_tile = _dispatch()
