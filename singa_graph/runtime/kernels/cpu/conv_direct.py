"""Direct convolutions with register-blocked tiles (``Conv2dDirect``: NCHW activations, the
weight held in blocks of ``B`` output channels, ``(O/B, kh, kw, S, B)``, S = C for one
group; made by passes/direct.py in CPU inference plans).

im2col copies every input value ``kh*kw`` times and then multiplies with a BLAS GEMM that
packs both operands again; over the small planes of squeezenet, densenet or googlenet at
batch 2 the copies cost as much as the products (densenet121's 128 -> 32 3x3 convs at 8x8:
35 us a sample of about 90). Here the sample's channel planes are copied once,
zero-padded (an unpadded conv reads the input's own), and a :func:`.simd.tile` computes
a block of up to 8 output pixels by two vectors of output channels (32 float32, 16
float64) in vector registers: per input channel and tap,
one weight vector per ``B`` output channels and one broadcast input value per pixel, each
fed to a fused multiply-add. Nothing is computed for padding lanes or wrapped-around
columns, and any stride and dilation work the same way: a pixel's inputs are found from
its offset (``offs``) into the padded planes. Each block's weights are one contiguous run,
read once per part from memory (the blocks are the outer loop) and then from cache: a
weight laid out ``(kh, kw, C, O)`` made the tiles read 128 of every ``4*O`` bytes, and
ResNet-18's 256-channel convs ran 1.5x slower with their weights out of cache.

A block's sums land in the part's scratch as ``(pixels, channels)`` rows; once its tiles
are done, the part transposes them into the NCHW output in 8 x 8 blocks in vector
registers (depthwise_channels_last.rows_to_planes; element by element, that copy took
16 of 31 us of a 16 -> 64 1x1 conv at 15x15, batch 2) and applies the conv epilogue
(bias, residual, activation) on the rows while they are in cache.

Threads (:func:`plan_parts`): the parts split the batch, each reading the whole weight;
but for heavy weights (:data:`SPLIT_WEIGHT_BYTES`), small planes and batches smaller than
the thread count they split the output channels, and each lays the batch's pixels side by
side so that a tile's rows span samples. Every output is one fused-multiply-add chain in
``(i, j, c)`` order, so results do not depend on the thread count; they differ from the
im2col kernel's in the last bits.
"""
from types import FunctionType

import numpy as np
from numba import njit, prange, uintp

from ....ops.conv_tiles import Conv2dDirect
from ....runtime import threads
from ...registry import carve, carved_bytes, kernel
from . import simd, winograd
from .depthwise_channels_last import rows_to_planes
from .epilogue import conv_epilogue, epilogue_args
from .loops import PARALLEL_WORK, batch_parts, bound, loops

#: output pixels of a full tile: its ``ROWS x 2`` vectors of sums, the two weight vectors
#: and the broadcast input fit the target's registers (32 with AVX-512, 16 with AVX2,
#: where 8 x 2 tiles spilled: squeezenet1_1's 16 -> 64 3x3 at 15x15 206 us against
#: onnxruntime's 76 on a 2-core AMD EPYC)
ROWS = 8 if simd.REGISTERS >= 32 else 6
#: output pixels of a full tile of four vectors of outputs (64 float32 channels with
#: AVX-512): 24 sums, the four weight vectors and the broadcast input in 32 registers, as
#: onnxruntime's AVX-512 conv kernel holds them. Per multiply-add it loads 0.42 values
#: against the 8 x 2 tile's 0.63, and on the 2-core Intel Xeon the tiles were bound by
#: loads (one thread, 480 x 256 by 64, medians of interleaved runs: 8 x 2 151 GFLOP/s,
#: 6 x 4 183). Only with 32 registers; with 16 only one or two rows take four vectors
WIDE_ROWS = 6 if simd.REGISTERS >= 32 else 0


def _tile(rows, vecs, x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail,
          more):
    """The tile of ``rows`` (ROWS, 4, 2 or 1) pixels x ``vecs`` vectors (1 or 2), or of
    ``WIDE_ROWS``, 4, 2 or 1 pixels x 4 vectors (simd.tile's arguments); ``TR1`` ... ``TW4``
    are one family's tiles (:func:`_with`)."""
    if vecs == 4:
        if rows == WIDE_ROWS:
            TW4(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
        elif rows == 4:
            T44(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
        elif rows == 2:
            T24(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
        else:
            T14(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
    elif vecs == 2:
        if rows == ROWS:
            TR2(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
        elif rows == 4:
            T42(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
        elif rows == 2:
            T22(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
        else:
            T12(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
    elif rows == ROWS:
        TR1(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
    elif rows == 4:
        T41(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
    elif rows == 2:
        T21(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)
    else:
        T11(x, xo, offs, p0, w, wo, wr, wv, e, eo, es, nc, kh, kw, ri, rj, rc, tail, more)


#: bytes of a block's weights that its tiles read over all their rows before the next
#: piece: the run of taps and channels a piece covers stays in the L1 cache (48 KiB a core
#: on Intel's server cores, 32 on AMD's) with room for the inputs beside it. A whole block
#: of 64 -> 64 3x3 weights, two vectors of outputs, is 72 KiB: every tile read it from L2,
#: and on the 2-core Intel Xeon the tiles ran at two thirds of onnxruntime's speed
PIECE_BYTES = 16 * 1024


@njit(inline="always")
def pieces(kh, kw, nc, vecs, rows_):
    """``(rows, taps, channels)`` of one piece of a block's sums over ``rows_`` rows of
    ``vecs`` vectors: whole kernel rows, single taps, or runs of ``channels`` channels of a
    tap, each a run of the ``(i, j, c)`` order (see :data:`PIECE_BYTES`). A block of one
    tile's rows reads its weights once either way: one piece."""
    per = vecs * simd.VECTOR_BYTES  # weight bytes of a tap's channel
    if rows_ <= ROWS or kh * kw * nc * per <= PIECE_BYTES:
        return kh, kw, nc
    if kw * nc * per <= PIECE_BYTES:
        return 1, kw, nc
    return 1, 1, max(1, min(nc, PIECE_BYTES // per))


def _columns(x, offs, rows_, w, wstep, wr, wv, e, es, e0, nc, kh, kw, ri, rj, rc, o0, o1,
             lanes, og, cg, cmax):
    """Output columns ``[o0, o1)`` of ``rows_`` rows (pixels), tile by tile: two vectors of
    columns at a time, over every row, so a block's weights are read from memory once and
    then from cache, a piece of them at a time (:func:`pieces`). Column ``o``'s block of
    weights starts at ``(o // lanes) * wstep`` (:func:`_tile`'s ``wr``, ``wv`` step inside
    it); row ``p`` of the output at ``p*es + o - e0``. Each vector reads its ``nc``
    channels from channel ``min((o // og) * cg, cmax)`` on (Conv2dDirect.group_start;
    ``og`` outputs and ``cg`` inputs a group, ``og >= o1`` and ``cmax = 0`` for one group),
    so where the columns span groups a tile takes one vector. ``_tile`` is one family's
    (:func:`_with`)."""
    o = o0
    grouped = og < o1  # [o0, o1) spans more than the first group
    while o < o1:
        vecs = 2 if o1 - o > lanes and not grouped else 1
        # four vectors: with 32 registers over any rows (:data:`WIDE_ROWS`); else over
        # one or two rows, where 2 x 2 tiles held four sums, too few to hide the
        # multiply-adds' latency (two threads, AMD EPYC, 2026-11-29: 2 x 1280 -> 1000 on
        # MatMulDirect's blocks 60 -> 52 us, 1 x 768 -> 1000 37 -> 28)
        if vecs == 2 and (rows_ <= 2 or WIDE_ROWS) and o1 - o > 3 * lanes:
            vecs = 4
        tail = min(lanes, o1 - o - lanes * (vecs - 1))
        xo = min((o // og) * cg, cmax) * rc
        wo = (o // lanes) * wstep
        ph, pw, pc = pieces(kh, kw, nc, vecs, rows_)
        full = WIDE_ROWS if vecs == 4 and WIDE_ROWS else ROWS  # rows of a full tile
        for i in range(0, kh, ph):
            for j in range(0, kw, pw):
                for c in range(0, nc, pc):
                    cc = min(pc, nc - c)
                    more = 1 if i + j + c > 0 else 0
                    xs = xo + i * ri + j * rj + c * rc
                    ws = wo + ((i * kw + j) * nc + c) * wr
                    p = 0
                    while p < rows_:
                        left = rows_ - p
                        rows = full if left >= full else (4 if left >= 4 else
                                                          (2 if left >= 2 else 1))
                        _tile(rows, vecs, x, xs, offs, p, w, ws, wr, wv, e,
                              p * es + o - e0, es, cc, ph, pw, ri, rj, rc, tail, more)
                        p += rows
        o += lanes * vecs


def variant(fn, suffix: str, **names):
    """A copy of the Python function ``fn`` with the globals ``names`` replaced, named
    with ``suffix`` (so that Numba caches it apart from ``fn``): one function's code
    serves several kernels."""
    f = FunctionType(fn.__code__, dict(fn.__globals__, **names), fn.__name__ + suffix)
    f.__qualname__ = fn.__qualname__ + suffix
    return f


def _with(fn, **names):
    """``fn`` compiled (inlined into its callers) with the globals ``names`` replaced: one
    Python function serves both tile families."""
    return njit(inline="always")(variant(fn, "", **names))


def _family(padded):
    shapes = {"TR1": (ROWS, 1), "TR2": (ROWS, 2), "T41": (4, 1), "T42": (4, 2),
              "T21": (2, 1), "T22": (2, 2), "T11": (1, 1), "T12": (1, 2),
              "T24": (2, 4), "T14": (1, 4), "T44": (4, 4), "TW4": (max(WIDE_ROWS, 1), 4)}
    tiles = {shape: simd.tile(*shape, padded) for shape in set(shapes.values())}  # TW4 is
    return _with(_tile, **{k: tiles[shape] for k, shape in shapes.items()})  # T14 with AVX2


#: :func:`_columns` on weights in blocks filled up with zeros (Conv2dDirect's, a
#: MatMulDirect's copy): plain loads
columns = _with(_columns, _tile=_family(True))
#: :func:`_columns` on a weight read where it is (a MatMulDirect's ``(K, N)``): masked
#: loads for the last vector, prefetch hints a few rows ahead
columns_in_place = _with(_columns, _tile=_family(False))


@njit(cache=True, nogil=True)
def pad_planes(x, n, p, pt, pl, hp, wp):
    """``p[c, :hp*wp]`` = channel ``c`` of sample ``n``, zero-padded to ``hp x wp``. The
    rows are copied from the sample's flat planes: indexed four ways, the copy took an
    element at a time (2 x 64 x 15 x 15: 20 us, a tenth of the conv on the tiles)."""
    c_, h, w = x.shape[1], x.shape[2], x.shape[3]
    z = p.dtype.type(0)
    src = x[n].reshape(-1)
    uw = uintp(w)
    end = uintp(hp * wp)
    for c in range(c_):
        row = p[c]
        for q in range(uintp(pt * wp + pl)):
            row[q] = z
        for iy in range(h):
            b = uintp((iy + pt) * wp + pl)
            s = uintp((c * h + iy) * w)
            for ix in range(uw):
                row[b + ix] = src[s + ix]
            # this row's right and the next row's left padding, never past the plane: with
            # no bottom padding, the next channel's plane (or the next part's scratch) follows
            for q in range(b + uw, min(b + uintp(wp), end)):
                row[q] = z
        for q in range(uintp((h + pt) * wp + pl), end):
            row[q] = z


#: weights of at least this many bytes are split across the parts by output channels
#: (each part then reads its share from memory once), as are small planes (whose tiles
#: then span the batch), where each part still gets two vectors of channels; otherwise
#: every part reads the whole weight, and the parts split the batch
SPLIT_WEIGHT_BYTES = 1 << 20


def plan_parts(n, o, pixels, nt, lanes, weight_bytes):
    """``(group, parts, blocks)``: samples per part group, parts, and output-channel blocks
    per group (see the module's docstring)."""
    vectors = -(-o // lanes)
    split = (weight_bytes >= SPLIT_WEIGHT_BYTES or pixels < 4 * ROWS or n < nt) and \
        vectors >= 2 * nt
    group = n if split or n < nt else 1
    groups = -(-n // group)
    blocks = max(1, min(nt // groups, vectors // 2 if split else vectors))
    return group, batch_parts(groups, nt) if blocks == 1 else groups * blocks, blocks


#: the axis of ``y3`` that holds the output channels (2 in conv_direct_last's variant)
CHANNEL_AXIS = 1


def _forward(x, w, y3, xp, e, offs, bias, has_bias, res3, has_res, act, alpha, beta, consts,
             geo, grp, group, parts, blocks, lanes):
    """``y3 = act(conv(x, w) + bias + res3)`` over ``parts`` parts; ``w`` the flat
    ``(O/lanes, kh, kw, C, lanes)`` weight, ``y3``/``res3`` ``(N, O, ho*wo)``,
    ``xp``/``e``/``offs`` each part's padded planes ``(group*C, hp*wp)``, sums
    ``(group*ho*wo*O)`` and pixel offsets; ``geo`` is
    ``(kh, kw, sh, sw, pt, pl, dh, dw, hp, wp)``, ``grp`` ``(og, cg, S)``: outputs and
    inputs a group and the input channels a block reads (Conv2dDirect.group_span). Parts
    split the batch into groups of ``group`` samples and the output channels into
    ``blocks`` (:func:`plan_parts`)."""
    n_, o_ = x.shape[0], y3.shape[CHANNEL_AXIS]
    nv = (o_ + lanes - 1) // lanes
    groups, across = (n_ + group - 1) // group, parts // blocks
    for t in prange(parts):
        g, b = t // blocks, t % blocks
        o0, o1 = min(o_, lanes * (b * nv // blocks)), min(o_, lanes * ((b + 1) * nv // blocks))
        for gi in range(g * groups // across, (g + 1) * groups // across):
            n0 = gi * group
            _group(x, w, y3, xp[t], e[t], offs[t], bias, has_bias, res3, has_res, act, alpha,
                   beta, consts, geo, grp, n0, min(n0 + group, n_), o0, o1, lanes)


@njit(cache=True, nogil=True, error_model="numpy")
def _group(x, w, y3, xt, et, ot, bias, has_bias, res3, has_res, act, alpha, beta, consts,
           geo, grp, n0, n1, o0, o1, lanes):
    """Output channels ``[o0, o1)`` of samples ``[n0, n1)``, in one part's scratch."""
    kh, kw, sh, sw, pt, pl, dh, dw, hp, wp = geo
    og, cg, span = grp
    c_, hw = x.shape[1], y3.shape[2]
    wo = (wp - dw * (kw - 1) - 1) // sw + 1
    cs = hp * wp
    slab = kh * kw * span * lanes  # one block of output channels' weights
    ob = o1 - o0
    padded = pt > 0 or pl > 0 or hp > x.shape[2] or wp > x.shape[3]
    first = 0
    if padded:
        for n in range(n0, n1):
            pad_planes(x, n, xt[(n - n0) * c_:(n - n0 + 1) * c_], pt, pl, hp, wp)
        flat = xt.reshape(-1)
    else:  # the input's own planes are the padded planes
        flat = x.reshape(-1)
        first = n0 * c_ * cs
    pixels = (n1 - n0) * hw
    for q in range(pixels):
        s, r = q // hw, q % hw
        ot[q] = first + s * c_ * cs + (r // wo) * sh * wp + (r % wo) * sw
    columns(flat, ot, pixels, w, slab, lanes, slab, et, ob, o0, span, kh, kw, dh * wp, dw, cs,
            o0, o1, lanes, og, cg, c_ - span)
    for n in range(n0, n1):
        base = (n - n0) * hw * ob
        rows_to_planes(et[base:base + hw * ob], y3[n], o0, ob, hw, False)
        conv_epilogue(y3[n, o0:o1], bias[o0:o1] if has_bias else bias, has_bias,
                      res3[n, o0:o1] if has_res else y3[n, o0:o1], has_res, act, alpha, beta,
                      consts)


_FORWARD = loops(_forward, error_model="numpy")


def _dims(op, x_shape, y_shape):
    """``(n, c, h, w, o, ho, wo)`` of a Conv2dDirect's (NCHW) or a Conv2dDirectNHWC's
    (channels-last, ``op.channels_last``) input and output shapes."""
    if getattr(op, "channels_last", False):
        (n, h, w, c), (_, ho, wo, o) = x_shape, y_shape
    else:
        (n, c, h, w), (_, o, ho, wo) = x_shape, y_shape
    return n, c, h, w, o, ho, wo


def _geometry(op, x_shape, w_shape, y_shape):
    (pt, pl, pb, pr), (sh, sw), (dh, dw) = op.padding, op.stride, op.dilation
    _, _, h, w, *_ = _dims(op, x_shape, y_shape)
    return (w_shape[1], w_shape[2], sh, sw, pt, pl, dh, dw, h + pt + pb, w + pl + pr)


def _specs(op, x_shape, w_shape, y_shape, dtype):
    """``((group, parts, blocks), scratch specs)``: each part's padded input, sums (none
    channels-last: the tiles store into the output) and pixel offsets."""
    n, c, _, _, o, ho, wo = _dims(op, x_shape, y_shape)
    hw = ho * wo
    lanes = simd.lanes(dtype)
    item = np.dtype(dtype).itemsize
    group, parts, blocks = plan_parts(n, o, hw, threads.num_threads(), lanes,
                                      int(np.prod(w_shape)) * item)
    geo = _geometry(op, x_shape, w_shape, y_shape)
    vectors = -(-o // lanes)
    ob = 0 if getattr(op, "channels_last", False) else \
        min(o, lanes * -(-vectors // blocks))  # the widest block
    padded = any(op.padding)
    return (group, parts, blocks), (((parts, group * c if padded else 0, geo[8] * geo[9]),
                                     dtype),
                                    ((parts, group * hw * ob), dtype),
                                    ((parts, group * hw), np.int64))


def workspace(op, ins, outs):
    """Workspace bytes of a Conv2dDirect or Conv2dDirectNHWC step."""
    return carved_bytes(*_specs(op, ins[0].shape, ins[1].shape, outs[0].shape,
                                outs[0].dtype)[1])


def blocked_step(op, ins, outs, ws, forward=None):
    """The step of a Conv2dDirect (or, with its ``forward`` pair, a Conv2dDirectNHWC):
    inputs ``ins`` (``x``, the blocked weight ``(O/B, kh, kw, C, B)``, bias, residual as
    the op has them), output ``outs[0]``, scratch carved from ``ws``."""
    (y,) = outs
    b = ins[1].shape[4]
    if b != simd.lanes(y.dtype):
        raise ValueError(f"{op.type}'s kernel reads blocks of {simd.lanes(y.dtype)} output "
                         f"channels, not {b}")
    (group, parts, blocks), specs = _specs(op, ins[0].shape, ins[1].shape, y.shape, y.dtype)
    return _step(op, ins, ins[1], y, carve(ws, *specs), group, parts, blocks,
                 forward or _FORWARD)


@kernel("Conv2dDirect", workspace=workspace)
def conv2d_direct(op, ins, outs, ws):
    return blocked_step(op, ins, outs, ws)


def _step(op, ins, w, y, scratch, group, parts, blocks, forward=_FORWARD):
    """The tiles' step of a conv with inputs ``ins`` (``x``, weight, bias, residual as
    the op has them) on the blocked weight ``w``, into ``y``; ``forward`` the
    (serial, parallel) kernels of the op's layout."""
    x = ins[0]
    _, kh, kw, c, _ = w.shape  # c: the input channels a block reads
    n, cin, _, _, o, ho, wo = _dims(op, x.shape, y.shape)  # o: the last block may be padded
    grp = (o // op.groups, cin // op.groups, c)
    y3 = y.reshape((n, ho * wo, o) if getattr(op, "channels_last", False) else (n, o, ho * wo))
    epi = epilogue_args(op, ins, y3)
    xp, e, offs = scratch
    fn = forward[parts > 1 and y.size * c * kh * kw >= PARALLEL_WORK]
    return bound(fn, x, w.reshape(-1), y3, xp, e, offs, *epi,
                 _geometry(op, x.shape, w.shape, y.shape), grp, group,
                 parts, blocks, simd.lanes(y.dtype))


# ------------------------------------------------- plain Conv2d ops (training, eager)
#: 3x3 stride-1 convs that Winograd takes stay with it from this many 4x4 output tiles a
#: batch, where its one weight transform a call is shared by enough tiles: below 32
#: channels, where the tiles win up to 256 tiles (16 -> 16: 32 to 128 tiles 1.1-1.6x
#: faster than Winograd, 256 tiles even) ...
WINOGRAD_TILES = 512
#: ... and from 32 channels, from this many tiles or ``O*C/512``, whichever is more. Batch
#: 2-32, two threads, interleaved in one process (AMD EPYC with AVX-512, 2026-11-29),
#: Winograd's time over the tiles' (their weight blocked every call, as here): 32 -> 32 at
#: 64 tiles 0.89-0.96, at 128 0.76-0.83; 64 -> 64 at 32 tiles 0.86-0.89, at 64 0.67-0.68,
#: at 128 0.58-0.61; 128 -> 128 at 32 tiles 0.97-1.03, at 64 0.73, at 128 0.55-0.72; 64
#: <-> 128 at 64 tiles 0.63-0.80; 256 -> 256 at 64 tiles 1.21-1.29 (its weight transform
#: is 16x 64 -> 64's), at 128 0.62-0.91. (The rule before, 512 tiles everywhere, came from
#: one measurement before Winograd's transforms were vectorised over channels.)
WINOGRAD_MIN_TILES = 64


def _winograd_takes(op, x_shape, w_shape, dtype) -> bool:
    """Whether Winograd keeps a 3x3 conv that it applies to, by the rules above."""
    if not winograd.chosen(op, x_shape, w_shape, dtype):
        return False
    o, c = w_shape[0], w_shape[1]
    n_tiles = winograd.tiles(op, x_shape)
    if min(o, c) < 32:
        return n_tiles >= WINOGRAD_TILES
    return n_tiles >= max(WINOGRAD_MIN_TILES, o * c // 512)


#: outputs a weight value is used for (batch x output pixels) below which the copy into
#: blocks costs more than the tiles save: it moves a weight at ~12 GB/s (512 -> 512 3x3,
#: 9.4 MB, 0.74 ms), as long as the tiles' whole conv at batch 8 on 2x2 outputs
WEIGHT_REUSE = 128


def chosen(op, x_shape, w_shape, y_shape, dtype) -> bool:
    """Whether a plain Conv2d (OIHW weight; training plans and eager runs, where no pass
    made it a Conv2dDirect) runs on the tiles, with its weight blocked into workspace on
    every call: with ``algo="auto"`` where :meth:`Conv2dDirect.wins` says so, but for the
    3x3 convs that Winograd shares over enough tiles (:func:`_winograd_takes`) and the
    weights used for fewer than :data:`WEIGHT_REUSE` outputs each. Shapes alone decide,
    so graph and eager runs choose alike. Batch 8, two threads (2026-11-28), the tiles on
    weights blocked beforehand against the kernels that ran them: ResNet-18's 3x3 stride-2
    convs at 64x64 input 64 -> 128 495 -> 286 us, 128 -> 256 608 -> 301, stride 1 128 ->
    128 at 8x8 2641 -> 843; the bench ResNet's (batch 32) 16 -> 32 and 32 -> 64 stride 2
    928 -> 531 and 669 -> 341."""
    if getattr(op, "algo", "auto") != "auto" or len(x_shape) != 4 or len(w_shape) != 4 \
            or op.groups != 1:  # block_weight does not spread groups (Conv2dDirect's do)
        return False
    if y_shape[0] * y_shape[2] * y_shape[3] < WEIGHT_REUSE:
        return False
    if not Conv2dDirect.wins(op, x_shape, w_shape, y_shape, dtype):
        return False
    return not _winograd_takes(op, x_shape, w_shape, dtype)


def _plain_specs(op, ins, outs):
    wshape = Conv2dDirect.blocked_shape(ins[1].shape, outs[0].dtype)
    parts, specs = _specs(op, ins[0].shape, wshape, outs[0].shape, outs[0].dtype)
    return parts, ((wshape, outs[0].dtype), *specs)


def plain_workspace(op, ins, outs):
    """Workspace of :func:`plain_forward`: the blocked weight and the tiles' scratch."""
    return carved_bytes(*_plain_specs(op, ins, outs)[1])


def plain_forward(op, ins, outs, ws):
    """The step of a plain Conv2d that :func:`chosen` takes: its OIHW weight blocked into
    workspace (:func:`block_weight`), then the tiles."""
    (group, parts, blocks), specs = _plain_specs(op, ins, outs)
    wb, *scratch = carve(ws, *specs)
    block = bound(block_weight, ins[1], wb, max(1, min(threads.num_threads(), wb.shape[0])))
    tiles = _step(op, ins, wb, outs[0], scratch, group, parts, blocks)

    def step():
        block()
        tiles()
    return step


@njit(cache=True, nogil=True, parallel=True)
def block_weight(w, wb, parts):
    """``wb[b, i, j, c, l] = w[b*B + l, c, i, j]``: an OIHW weight in blocks of ``B`` output
    channels (Conv2dDirect's layout), zero past the last one; blocks split over ``parts``."""
    o, c_, kh, kw = w.shape
    nb, b_ = wb.shape[0], wb.shape[4]
    zero = wb.dtype.type(0)
    for t in prange(parts):
        for b in range(t * nb // parts, (t + 1) * nb // parts):
            lanes = min(b_, o - b * b_)
            for i in range(kh):
                for j in range(kw):
                    for c in range(c_):
                        for lane in range(lanes):
                            wb[b, i, j, c, lane] = w[b * b_ + lane, c, i, j]
                        for lane in range(lanes, b_):
                            wb[b, i, j, c, lane] = zero
