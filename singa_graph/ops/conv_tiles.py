"""The convolutions of CPU inference plans' register-tile and channels-last kernels, made
by passes (passes/layout.py, passes/direct.py) from plain :class:`~.conv.Conv2d` nodes:
``Conv2dNHWC`` (pointwise and depthwise convs on channels-last activations),
``Conv2dDirect`` (NCHW, the weight in blocks of output channels) and
``Conv2dDirectNHWC``, with the rules that choose them (:meth:`Conv2dDirect.wins`,
:func:`on_planes`, :func:`pointwise_nhwc`) and the measurements behind those rules. All
are float32 only and inference only.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .. import host
from ..errors import ShapeError, UnsupportedOpError
from ._util import tiled, vector_block
from .conv import Conv2d

__all__ = ["Conv2dNHWC", "Conv2dDirect", "Conv2dDirectNHWC", "on_planes", "pointwise_nhwc",
           "stem_on_tiles"]


class Conv2dNHWC(Conv2d):
    """:class:`Conv2d` on channels-last activations: x ``(N, H, W, C)``, y and the residual
    ``(N, Ho, Wo, O)``, the weight ``(kh, kw, C/groups, O)`` (HWIO), or ``(O, C, 1, 1)``
    for a pointwise conv with ``weight_layout="OIHW"`` (its kernel then takes the dot
    products of rows of the weight with the pixels, for convs over few pixels). Made by the
    channels-last pass of CPU inference plans (:mod:`singa_graph.passes.layout`) for the
    convs it has kernels for (:meth:`supports`): a pointwise conv is then one GEMM over the
    whole batch, a depthwise conv reads every tap as a run of channels, and neither
    transposes an operand. float32 only (:func:`~singa_graph.ops._util.tiled`); inference
    only: no gradient."""

    differentiable = False
    weight_layout = "HWIO"
    channels_last = True

    @staticmethod
    def supports(op, w_shape) -> bool:
        """Whether a Conv2d ``op`` with (OIHW) weight shape ``w_shape`` has a channels-last
        kernel: pointwise (1x1, stride 1, no padding, one group) or depthwise (one input
        and one output channel per group, the same stride both ways)."""
        o, cg, kh, kw = w_shape
        return (cg == 1 and o == op.groups and op.stride[0] == op.stride[1]) or \
            pointwise_nhwc(op, w_shape)

    def _taps(self, w_shape) -> int:
        return w_shape[2] * w_shape[3] if self.weight_layout == "OIHW" else \
            w_shape[0] * w_shape[1]

    def _nchw(self, shape):
        if len(shape) != 4:
            raise ShapeError(f"Conv2dNHWC needs a 4-d NHWC input, got {shape}")
        n, h, w, c = shape
        return (n, c, h, w)

    def _layout(self, shape):
        n, o, h, w = shape
        return (n, h, w, o)

    def infer(self, x, w, *rest):
        if len(w.shape) != 4:
            raise ShapeError(f"Conv2dNHWC needs a 4-d (kh, kw, C/groups, O) weight, got "
                             f"{w.shape}")
        kh, kw, cg, o = w.shape
        if self.weight_layout == "OIHW":
            o, cg, kh, kw = w.shape
        oihw = SimpleNamespace(shape=(o, cg, kh, kw), dtype=w.dtype, name=w.name, ndim=4)
        if not self.supports(self, oihw.shape) or (self.weight_layout == "OIHW"
                                                   and not pointwise_nhwc(self, oihw.shape)):
            raise UnsupportedOpError(f"Conv2dNHWC has kernels for pointwise and depthwise "
                                     f"convs only, not weight {w.shape} with groups="
                                     f"{self.groups}, stride {self.stride}")
        if not tiled(x.dtype):
            raise UnsupportedOpError(f"Conv2dNHWC computes float32, not {x.dtype}")
        return super().infer(x, oihw, *rest)

    def gradient(self, inputs, outputs, dys, needs):
        raise UnsupportedOpError("Conv2dNHWC is made for inference plans and has no gradient")


# Conv2dDirect.wins: the convs that its register tiles run faster than im2col + GEMM or
# Winograd (runtime/kernels/cpu/conv_direct.py, passes/direct.py)
#: output pixels per sample above which convs keep im2col + GEMM (or Winograd). It was 256
#: while the tiles' output went into NCHW one element at a time; with the 8x8 register
#: transposes the tiles win up to 56x56 (two threads, 2026-11-28, against the kernel that
#: ran them: 64 -> 64 at 56x56, batch 1, 1458 -> 1126 us; 128 -> 128 at 56x56 6396 ->
#: 3972; 128 -> 128 at 28x28 3724 -> 929; 256 -> 256 stride 2 to 14x14 1309 -> 1183; a 7x7
#: stride-2 stem on 128x128, batch 1, 907 -> 560; 48 -> 48 at 32x32, batch 2, 523 -> 415)
DIRECT_MAX_PIXELS = 4096
#: terms per output (``C*kh*kw``) below which the im2col GEMM wins: a 3x3 stride-2 stem on
#: three channels 57 against 92 us (stems now take the output-row tiles, on_planes)
DIRECT_MIN_TERMS = 64
#: 1x1 convs go direct on planes of at most this many pixels, from this many input
#: channels and 32 output channels (two AVX-512 vectors): elsewhere BLAS's GEMM on the input itself
#: wins (256 -> 128 at 16x16: 175 against 195 us; 128 -> 16 at 15x15 12 against 14), here
#: it loses (1024 -> 128 at 4x4 107 -> 42, 832 -> 384 at 2x2 56 -> 37, 512 -> 128 at 8x8
#: 92 -> 83)
DIRECT_POINTWISE_MAX_PIXELS, DIRECT_POINTWISE_MIN_CHANNELS = 64, 128
DIRECT_POINTWISE_MIN_OUT_CHANNELS = 32
#: weights of more bytes stay with the GEMM kernels: a tile streams the whole weight, and
#: over few pixels the product waits on memory (512 -> 512 at 2x2: 261 against 302 us)
DIRECT_MAX_WEIGHT_BYTES = 16 << 20
#: grouped convs (more than one input channel a group) go direct on planes of at most this
#: many output pixels. Batch 2, 3x3, 8 channels a group (RegNet's), two threads
#: (2026-11-28), against im2col and a GEMM a group and sample: 440 channels at 2x2 92 ->
#: 31 us, stride 2 to 4x4 112 -> 37, 208 at 4x4 59 -> 30, 104 at 8x8 45 -> 38, 48 at 8x8
#: 24 -> 20; at 16x16 they lose (48 channels 54 -> 65): half their terms are zeros
DIRECT_GROUPED_MAX_PIXELS = 64
#: dense convs over at most this many input channels (an image's: every CNN's stem) may run
#: on tiles along the output rows (runtime/kernels/cpu/conv_planes.py), in every mode
PLANES_MAX_CHANNELS = 4
#: ... those with at most this many output channels, or with DIRECT_MIN_TERMS terms. Batch
#: 2, two threads (2026-11-28), against the kernels that ran them: 7x7 stride-2 stems 3 ->
#: 64 at 64x64 0.77x (against the im2col GEMM; 426 -> about 190 us against Conv2dDirect's
#: tiles in resnet18's plan), at 224x224 0.44x; 3x3 stride 2 3 -> 16 0.79-0.85x, 3 -> 32
#: 0.75-0.88x; but 3 -> 64 1.1-1.2x, where the GEMM has rows enough
PLANES_MAX_OUT_CHANNELS = 32


#: windows of at least this many taps over few input channels (ResNet's and GoogLeNet's 7x7
#: stems) run on Conv2dDirect's register tiles rather than the output-row tiles on
#: processors with 32 vector registers (AVX-512), where the tiles hold 8 pixels by 32
#: output channels. Batch 2, two threads, the step alone, AMD EPYC with AVX-512
#: (2026-11-29), output-row tiles against register tiles: 3 -> 64 7x7 stride 2 at 64x64
#: 291-296 against 217-239 us (onnxruntime 189), at 128x128 1148 against 847; batch 8
#: 1149 against 834; 3 -> 32 148 against 119; 3 -> 96 432 against 358. 5x5 stems keep
#: the output-row tiles (98 against 137 us)
STEM_TILE_TAPS = 49


def stem_on_tiles(op, w_shape, y_shape) -> bool:
    """Whether a conv that :func:`on_planes` gives the output-row tiles runs on
    Conv2dDirect's register tiles instead (:data:`STEM_TILE_TAPS`); the host's registers and
    the shapes decide, so graph and eager runs choose alike."""
    o, c, kh, kw = w_shape
    return (kh * kw >= STEM_TILE_TAPS and c * kh * kw >= DIRECT_MIN_TERMS
            and y_shape[2] * y_shape[3] <= DIRECT_MAX_PIXELS and host.vector_registers() >= 32)


def on_planes(op, w_shape) -> bool:
    """Whether the Conv2d ``op`` with OIHW weight ``w_shape`` runs on the output-row tiles
    (shapes alone decide, so graph and eager runs choose alike)."""
    o, c, kh, kw = w_shape
    return (op.groups == 1 and op.stride[0] == op.stride[1] <= 2 and c <= PLANES_MAX_CHANNELS
            and (o <= PLANES_MAX_OUT_CHANNELS or c * kh * kw >= DIRECT_MIN_TERMS))


class Conv2dDirect(Conv2d):
    """:class:`Conv2d` on NCHW activations whose weight is held in blocks of ``B`` output
    channels, ``(ceil(O/B), kh, kw, S, B)``, ``B`` the float32 values of a vector register
    (16 with AVX-512, 8 with AVX2), the last block filled up with zeros (``out_channels`` is
    ``O``): its kernel keeps tiles of output pixels by output channels in vector registers
    and reads a tap's weights for ``B`` output channels as one vector, each block's weights
    as one contiguous run, with no im2col. ``S`` is ``C`` for one group. Grouped convs (of
    more than one input channel a group: RegNet's, ResNeXt's) read ``S`` =
    :meth:`group_span` input channels a block, from channel :meth:`group_start` of the
    block's first output channel on: the ``B`` lanes' groups side by side, each lane's
    weights zero outside its group, so that one vector of weights still serves a tap. Made
    by :mod:`singa_graph.passes.direct` in CPU inference plans; float32 only
    (:func:`~singa_graph.ops._util.tiled`); inference only: no gradient."""

    differentiable = False

    @staticmethod
    def block(dtype) -> int:
        """``B`` for weights of ``dtype``."""
        return vector_block(dtype)

    @staticmethod
    def group_span(o, c, groups, block) -> int:
        """``S``: the input channels that a block of ``block`` output channels reads, of
        ``c``, in a conv of ``o`` outputs and ``groups`` groups (the most over the
        blocks: its groups' channels side by side)."""
        if groups == 1:
            return c
        og, cg = o // groups, c // groups
        return min(c, max(((min(o, b + block) - 1) // og + 1 - b // og) * cg
                          for b in range(0, o, block)))

    @staticmethod
    def group_start(o0, og, cg, c, span) -> int:
        """The first input channel of the block starting at output channel ``o0``."""
        return min((o0 // og) * cg, c - span)

    @staticmethod
    def blocked_shape(w_shape, dtype, groups=1) -> tuple:
        """The ``(ceil(O/B), kh, kw, S, B)`` shape that an OIHW ``w_shape`` takes."""
        b = Conv2dDirect.block(dtype)
        o, cg, kh, kw = w_shape
        return (-(-o // b), kh, kw, Conv2dDirect.group_span(o, cg * groups, groups, b), b)

    @staticmethod
    def spread_groups(w, groups):
        """An OIHW grouped weight ``w`` as ``(O, S, kh, kw)``: each output channel's
        weights at its place among the ``S`` input channels of its block, zero elsewhere
        (numpy; :meth:`blocked_shape`'s permutation then gives the kernel's layout)."""
        o, cg = w.shape[0], w.shape[1]
        c, b = cg * groups, Conv2dDirect.block(w.dtype)
        span = Conv2dDirect.group_span(o, c, groups, b)
        out = np.zeros((o, span) + w.shape[2:], w.dtype)
        og = o // groups
        for k in range(o):
            at = (k // og) * cg - Conv2dDirect.group_start(k - k % b, og, cg, c, span)
            out[k, at:at + cg] = w[k]
        return out

    @staticmethod
    def supports(op, w_shape, dtype) -> bool:
        """Whether a Conv2d ``op`` with (OIHW) weight shape ``w_shape`` can run so: one
        group, or groups of more than one input channel (depthwise convs have kernels of
        their own), float32 (:func:`~singa_graph.ops._util.tiled`)."""
        return (type(op) is Conv2d and len(w_shape) == 4
                and (op.groups == 1 or w_shape[1] > 1) and tiled(dtype))

    @staticmethod
    def wins(op, x_shape, w_shape, y_shape, dtype) -> bool:
        """Whether a Conv2d ``op`` (OIHW ``w_shape``) runs faster as a Conv2dDirect (by the
        measurements beside :data:`DIRECT_MAX_PIXELS` and the others)."""
        o, c, kh, kw = w_shape
        pixels = y_shape[2] * y_shape[3]
        if not Conv2dDirect.supports(op, w_shape, dtype):
            return False
        if op.groups > 1:  # the other kernel runs a GEMM a group and sample: tiny ones
            return pixels <= DIRECT_GROUPED_MAX_PIXELS
        if on_planes(op, w_shape) and not stem_on_tiles(op, w_shape, y_shape):
            return False  # the plain Conv2d kernel has tiles of its own for these
        if c * kh * kw < DIRECT_MIN_TERMS or pixels > DIRECT_MAX_PIXELS:
            return False
        if kh * kw == 1 and (pixels > DIRECT_POINTWISE_MAX_PIXELS
                             or c < DIRECT_POINTWISE_MIN_CHANNELS
                             or o < DIRECT_POINTWISE_MIN_OUT_CHANNELS):
            return False
        # 3x3 convs that Winograd would take go direct too: in a plan its transformed
        # weights are workspace, so it transforms them again on every call. On the 2-core
        # Intel Xeon (Emerald Rapids) that transform alone took 330 of a 64 -> 64 conv's 500
        # us at 16x16, batch 2, where the tiles take 175 (resnet18 5.7 -> 3.5 ms, googlenet
        # 4.4 -> 3.8); on the AMD EPYC the tiles were 10% slower there (201 against 180 us)
        return o * c * kh * kw * np.dtype(dtype).itemsize <= DIRECT_MAX_WEIGHT_BYTES

    def _taps(self, w_shape) -> int:
        return w_shape[1] * w_shape[2]  # (O/B, kh, kw, S, B)

    @classmethod
    def of(cls, conv, out_channels):
        """The Conv2dDirect of the Conv2d op ``conv`` with ``out_channels`` outputs."""
        op = cls.__new__(cls)
        op.__dict__.update(conv.__dict__)
        op.out_channels = int(out_channels)
        return op

    def infer(self, x, w, *rest):
        if len(w.shape) != 5 or w.shape[4] != self.block(w.dtype):
            raise ShapeError(f"Conv2dDirect needs a (O/B, kh, kw, C, B) weight with B = "
                             f"{self.block(w.dtype)} for {np.dtype(w.dtype)}, got {w.shape}")
        blocks, kh, kw, span, b = w.shape
        o, g = self.out_channels, self.groups
        if not blocks * b - b < o <= blocks * b:
            raise ShapeError(f"Conv2dDirect's weight {w.shape} does not hold {o} output "
                             "channels")
        c = self._nchw(x.shape)[1] if len(x.shape) == 4 else None
        cg = c // g if c is not None else span
        if c is not None and (c % g or o % g or span != self.group_span(o, c, g, b)):
            raise ShapeError(f"{self.type}'s weight {w.shape} does not fit {g} groups of "
                             f"input {x.shape}: it reads "
                             f"{self.group_span(o, c, g, b)} channels a block")
        oihw = SimpleNamespace(shape=(o, cg, kh, kw), dtype=w.dtype, name=w.name, ndim=4)
        if not tiled(x.dtype):
            raise UnsupportedOpError(f"Conv2dDirect computes float32, not {x.dtype}")
        return super().infer(x, oihw, *rest)

    def gradient(self, inputs, outputs, dys, needs):
        raise UnsupportedOpError(f"{self.type} is made for inference plans and has no "
                                 "gradient")


class Conv2dDirectNHWC(Conv2dDirect):
    """:class:`Conv2dDirect` on channels-last activations: x ``(N, H, W, C)``, y and the
    residual ``(N, Ho, Wo, O)``, the weight blocked as Conv2dDirect's. Its kernel
    (runtime/kernels/cpu/conv_direct_last.py) runs the same register tiles, reading a
    pixel's channels as one contiguous run and storing each tile's block of sums in place:
    nothing is transposed. Made by the channels-last pass of CPU inference plans
    (:mod:`singa_graph.passes.layout`) for the dense convs of a chain."""

    channels_last = True
    _nchw = Conv2dNHWC._nchw
    _layout = Conv2dNHWC._layout


def pointwise_nhwc(op, w_shape) -> bool:
    """A 1x1 stride-1 unpadded conv of one group (OIHW ``w_shape``)."""
    return (op.groups == 1 and w_shape[2] == w_shape[3] == 1 and op.stride == (1, 1)
            and not any(op.padding))
