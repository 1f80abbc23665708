"""Convolution and transposed convolution over any number of spatial axes (ONNX Conv and
ConvTranspose beyond the 1-d/2-d ops of :mod:`.conv`): 3-d video and volume models.

``ConvNd`` is im2col through strided views of the padded input and one batched matrix
product per group; ``ConvTransposeNd`` is the matrix product followed by col2im, giving the
full transposed output (the importer crops its pads). Not differentiable yet: training
uses the 2-d ops, which have gradients.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float, same_dtype
from .pool_nd import window_count

__all__ = ["ConvNd", "ConvTransposeNd", "DeformConv", "conv_nd", "conv_transpose_nd"]


class _Nd(Operation):
    differentiable = False

    def __init__(self, strides, dilations, pads=None, groups=1, output_padding=None):
        self.strides = tuple(int(v) for v in strides)
        self.dilations = tuple(int(v) for v in dilations)
        k = len(self.strides)
        self.pads = tuple(int(v) for v in (pads or [0] * 2 * k))
        self.groups = int(groups)
        self.output_padding = tuple(int(v) for v in (output_padding or [0] * k))


class ConvNd(_Nd):
    """``y[n, m] = sum_c w[m, c] * x[n, c]`` over each window (groups, strides,
    dilations, ONNX pads); weight ``(M, C // groups, *kernel)``."""

    def infer(self, x, w):
        need_float(x, w)
        same_dtype(x, w)
        k = len(self.strides)
        if x.ndim != k + 2 or w.ndim != k + 2 or x.shape[1] != w.shape[1] * self.groups \
                or w.shape[0] % self.groups:
            raise ShapeError(f"{k}-d conv of {x.shape} with weight {w.shape}, "
                             f"groups={self.groups}")
        out = tuple(window_count(n, kk, s, d, self.pads[i], self.pads[k + i], False)
                    for i, (n, kk, s, d) in enumerate(zip(x.shape[2:], w.shape[2:],
                                                          self.strides, self.dilations)))
        return [TensorSpec((x.shape[0], w.shape[0]) + out, x.dtype)]


class ConvTransposeNd(_Nd):
    """The full transposed convolution (no pads cropped): weight ``(C, M // groups,
    *kernel)``, output ``s * (i - 1) + d * (k - 1) + 1 + output_padding`` per axis."""

    def infer(self, x, w):
        need_float(x, w)
        same_dtype(x, w)
        k = len(self.strides)
        if x.ndim != k + 2 or w.ndim != k + 2 or x.shape[1] != w.shape[0] or \
                x.shape[1] % self.groups:
            raise ShapeError(f"{k}-d transposed conv of {x.shape} with weight {w.shape}, "
                             f"groups={self.groups}")
        full = tuple(s * (i - 1) + d * (kk - 1) + 1 + op for i, kk, s, d, op in
                     zip(x.shape[2:], w.shape[2:], self.strides, self.dilations,
                         self.output_padding))
        return [TensorSpec((x.shape[0], w.shape[1] * self.groups) + full, x.dtype)]


def conv_nd(x, w, strides, dilations, pads, groups=1):
    return ConvNd(strides, dilations, pads, groups)(x, w)


def conv_transpose_nd(x, w, strides, dilations, groups=1, output_padding=None):
    return ConvTransposeNd(strides, dilations, None, groups, output_padding)(x, w)


class DeformConv(_Nd):
    """2-d deformable convolution (ONNX DeformConv): each kernel tap reads the input
    bilinearly (zero outside) at its place moved by ``offset (N, offset_group * 2 * kh * kw,
    oh, ow)`` and weighted by ``mask`` (ones when absent), then the taps are combined as in
    a grouped convolution. Inputs ``(x, w, offset, mask)``; the bias is added by the
    importer."""

    def __init__(self, strides, dilations, pads=None, groups=1, offset_groups=1):
        super().__init__(strides, dilations, pads, groups)
        self.offset_groups = int(offset_groups)

    def infer(self, x, w, offset, mask):
        need_float(x, w, offset, mask)
        if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1] * self.groups:
            raise ShapeError(f"DeformConv of {x.shape} with weight {w.shape}")
        out = tuple(window_count(n, kk, s, d, self.pads[i], self.pads[2 + i], False)
                    for i, (n, kk, s, d) in enumerate(zip(x.shape[2:], w.shape[2:],
                                                          self.strides, self.dilations)))
        taps = w.shape[2] * w.shape[3]
        want = (x.shape[0], self.offset_groups * 2 * taps) + out
        if offset.shape != want or mask.shape != (x.shape[0], self.offset_groups * taps) + out:
            raise ShapeError(f"DeformConv: offset {offset.shape} (expected {want}) or mask "
                             f"{mask.shape} do not fit")
        return [TensorSpec((x.shape[0], w.shape[0]) + out, x.dtype)]
