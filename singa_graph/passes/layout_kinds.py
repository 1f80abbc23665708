"""Which nodes of a CPU inference graph have a channels-last form (passes/layout.py), and
the measured rules that keep some convolutions NCHW on some processors."""
from __future__ import annotations

import numpy as np

from .. import host
from ..ops import formulas
from ..ops._util import tiled
from ..ops.conv_tiles import (DIRECT_MIN_TERMS, DIRECT_MAX_PIXELS, PLANES_MAX_CHANNELS,
                              Conv2dDirect, Conv2dNHWC, on_planes, pointwise_nhwc,
                              stem_on_tiles)
from .held_weights import STREAM_ROWS, STREAM_WEIGHT_BYTES

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _activation(t) -> bool:
    return len(t.shape) == 4 and tiled(t.dtype)


def _kind(n) -> str | None:
    """``'depthwise'``, ``'pointwise'``, ``'dense'`` (a conv), ``'pool'`` (global average),
    ``'maxpool'``, ``'concat'`` or ``'elementwise'`` for a node that has a channels-last
    form, else None."""
    if _spatial_mean(n):
        return "mean"
    if not n.outputs or not _activation(n.outputs[0]) or len(n.outputs) != 1:
        return None
    y = n.outputs[0]
    if n.type == "Conv2d":
        x, w = n.inputs[0], n.inputs[1]
        if not (_activation(x) and w.creator is None and w.data is not None):
            return None
        if not Conv2dNHWC.supports(n.op, w.shape):
            return "dense" if _dense(n.op, w.shape, y.shape) else None
        if pointwise_nhwc(n.op, w.shape):
            streamed = (x.shape[0] * x.shape[2] * x.shape[3] <= STREAM_ROWS
                        and w.nbytes >= STREAM_WEIGHT_BYTES)
            if streamed:
                return "dense"
            return None if _narrow_on_planes(x.shape, w.shape) else "pointwise"
        return None if _planes_win(n.op, x.shape) else "depthwise"
    if n.type == "GlobalAveragePool" or (n.type == "Mean" and n.op.keepdims
                                         and tuple(n.op.axes or ()) == (2, 3)):
        return "pool" if _activation(n.inputs[0]) else None
    if n.type == "MaxPool2d":
        return "maxpool" if _activation(n.inputs[0]) else None
    if n.type == "Concat":
        return "concat" if n.op.axis == 1 and all(map(_activation, n.inputs)) else None
    if formulas.formula_of(n.op) is None:
        return None
    per_channel = (y.shape[0], y.shape[1], 1, 1)
    for x in n.inputs:
        if x.dtype != y.dtype and x.size != 1:
            return None
        if not (x.shape == y.shape or x.size == 1 or _per_channel(x, y.shape[1])
                or (len(x.shape) == 4 and x.shape in (per_channel, (1,) + per_channel[1:]))):
            return None
    return "elementwise"


def _per_channel(x, c) -> bool:
    """A ``(C, 1, 1)`` operand (ConvNeXt's layer scale): channels-last it is ``(C,)``."""
    return tuple(x.shape) == (c, 1, 1)


def _transpose(n, perm) -> bool:
    return n is not None and n.type == "Transpose" and tuple(n.op.perm) == perm


def _cancelled_exit(t, uses):
    """The graph's own ``Transpose`` to channels-last of ``t``, if one reads it: a chain
    that makes ``t`` makes that Transpose's output instead (ConvNeXt's blocks permute to
    channels-last after each depthwise conv and back before the residual add)."""
    for r in uses.readers.get(id(t), []):
        if _transpose(r, TO_NHWC):
            return r
    return None


def _cancelled_entry(x) -> bool:
    """Whether ``x`` comes from the graph's own ``Transpose`` out of channels-last: a chain
    reads that Transpose's input instead."""
    return _transpose(x.creator, TO_NCHW) and len(x.creator.inputs[0].shape) == 4


def _spatial_mean(n) -> bool:
    """A mean over the planes that keeps no axes for them (MnasNet's ``x.mean([2, 3])``):
    its ``(N, C)`` result has the same bytes in either layout, so in a chain it reads the
    channels-last tensor as a mean over axes 1 and 2, and the chain pays no transpose at
    its end. mnasnet0_5's, over 1280 channels at 2x2, batch 2 (AMD EPYC, 2026-11-29):
    Transpose 3-5 us and NCHW mean 5 us, against about 1 us."""
    if n.type != "Mean" or n.op.keepdims or len(n.inputs) != 1 or len(n.outputs) != 1:
        return False
    x = n.inputs[0]
    return _activation(x) and tuple(sorted(a % 4 for a in (n.op.axes or ()))) == (2, 3)


#: stride-1 depthwise convs on planes of at least this many pixels with fewer channels
#: than this stay NCHW on processors with 64-byte vectors: the plane-by-plane kernel
#: vectorises along their long rows, where the channels-last one has a short vector of
#: channels per pixel and tap. Batch 2, two threads, Intel Xeon with AVX-512 (2026-11-27),
#: NCHW against NHWC: 16 channels at 32x32 15 against 46 us, 32 at 32x32 27 against 31, 24
#: at 16x16 8 against 17; 48 at 16x16 11 against 15 and 96 at 16x16 19 against 23 gain
#: less than the two transposes they would add inside a chain. With 32-byte vectors (AVX2)
#: the planes lost: on the AMD EPYC (Zen 3, 2026-11-28, the step alone, hot) 16 channels
#: at 32x32 40-45 us against 26-29 (mnasnet0_5), 32 at 32x32 76-78 against 42-46
#: (mobilenet_v2), the transpose the chain then starts with costing the same as the one it
#: saved; there every depthwise conv joins its chain.
PLANE_PIXELS, PLANE_MAX_CHANNELS = 256, 48


#: pointwise convs over at least this many pixels (batch included) with at most
#: NARROW_TERMS input times output channels stay NCHW on processors with 64-byte vectors,
#: and a chain starts behind them. Channels-last, such a conv gives each pixel a part of one
#: vector of outputs and a handful of terms, so the register tiles spend their time
#: starting and storing tiles; in NCHW its pixels fill the vectors. mnasnet0_5's first
#: pointwise convs, batch 2 at 32x32, AMD EPYC with AVX-512 (2026-11-29), one thread: 16 ->
#: 8 27.8 against 9.8 us, 8 -> 24 32.1 / 19.4, the transpose into the chain then on 24
#: channels 11.6 against 5.4 on 16 (65 -> 41 us in all; two threads 38 -> 31). 32 -> 16
#: (mobilenet_v2, 512 terms) was even, so it joins its chain.
NARROW_PIXELS, NARROW_TERMS = 1024, 256


def _narrow_on_planes(x_shape, w_shape) -> bool:
    return (_pixels(x_shape) >= NARROW_PIXELS and w_shape[0] * w_shape[1] <= NARROW_TERMS
            and host.vector_bytes() >= 64)


def _dense(op, w_shape, y_shape) -> bool:
    """Whether a conv that is neither pointwise nor depthwise runs channels-last, on the
    register tiles (Conv2dDirectNHWC): the convs that Conv2dDirect can take, over planes up
    to its limit, and an image's stem where it has no tiles of its own or has Conv2dDirect's
    anyway. A stem that runs on Conv2dDirect's tiles (a 7x7 one, ``stem_on_tiles``) joins
    the chain: the chain then transposes the 3-channel image rather than the pool's 64
    channels, the pool after the stem runs channels-last, and the tiles take a kernel row's
    taps and channels as one run (conv_direct_last.py). resnet18, batch 2, two threads,
    both plans in one process (2026-12-02, Intel Xeon): stem, pool and transpose 347 -> 311
    and 303 -> 268 us. So does a stem of too few terms for the NCHW tiles and too many
    outputs for the output-row tiles (squeezenet1_1's 3 -> 64 3x3 stride 2, an im2col GEMM
    in NCHW) on processors with 32 vector registers: its kernel row is a run of 9 values
    here. The step alone, hot, two threads (Intel Xeon, 2026-12-02): conv 39-44 against the
    GEMM's 45-47 us, the max pool after it 7-8 against 20-22, the transpose into the chain
    on the image 6 against 4; the whole model 0.94x (both plans in one process, alternating
    bursts). (Before the epilogue ran on contiguous rows, the tiles took 247 us there.)
    Unlike the NCHW pass (direct.py) it also takes convs of few terms (ResNet's strided 1x1
    shortcuts): their only other kernel would cost two transposes in the chain."""
    o, c, kh, kw = w_shape
    few_terms = c <= PLANES_MAX_CHANNELS and c * kh * kw < DIRECT_MIN_TERMS
    return (Conv2dDirect.supports(op, w_shape, np.float32)
            and (not on_planes(op, w_shape) or stem_on_tiles(op, w_shape, y_shape))
            and y_shape[2] * y_shape[3] <= DIRECT_MAX_PIXELS
            and not (few_terms and host.vector_registers() < 32))


def _planes_win(op, x_shape) -> bool:
    return (op.stride == (1, 1) and x_shape[2] * x_shape[3] >= PLANE_PIXELS
            and x_shape[1] < PLANE_MAX_CHANNELS and host.vector_bytes() >= 64)


def _spatial(t) -> bool:
    """A 4-d tensor whose NCHW and NHWC bytes differ (more than one pixel)."""
    return len(t.shape) == 4 and t.shape[2] * t.shape[3] > 1


def _pixels(x_shape) -> int:
    n, _, h, w = x_shape
    return n * h * w
