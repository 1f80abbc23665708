"""Pooling over any number of spatial axes with dilations: max, average and Lp pooling
(ONNX MaxPool/AveragePool beyond the 2-d undilated case, and LpPool), and Col2Im, which
adds sliding blocks back over the same kind of windows.

The window positions follow onnxruntime: ``ceil_mode`` keeps a last partial window unless
it would start in the trailing padding. Average pooling divides by the number of taps in
the input (or, with ``count_include_pad``, in the input and its explicit padding). The
per-position divisor depends on shapes only and is computed once, here.

Not differentiable: the 2-d undilated max and average pooling that training uses
(:mod:`.pool`) have gradients; these forms are for imported inference graphs.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec

__all__ = ["PoolNd", "Col2Im", "pool_nd"]


def window_count(n_in, k, s, d, p0, p1, ceil_mode) -> int:
    span = d * (k - 1) + 1
    total = n_in + p0 + p1 - span
    if total < 0:
        raise ShapeError(f"pooling window of {k} taps (dilation {d}) is larger than the "
                         f"input length {n_in} padded by {p0}, {p1}")
    out = (math.ceil(total / s) if ceil_mode else total // s) + 1
    if ceil_mode and (out - 1) * s >= n_in + p0:
        out -= 1  # a last window may not start in the trailing padding
    return out


class PoolNd(Operation):
    """``kind`` "max", "avg" or "lp" pooling of an ``(N, C, *spatial)`` tensor."""

    differentiable = False

    def __init__(self, kind, kernel, strides=None, dilations=None, pads=None,
                 ceil_mode=False, count_include_pad=False, p=2, indices=False,
                 storage_order=0):
        if kind not in ("max", "avg", "lp"):
            raise ValueError(f"pool kind must be max, avg or lp, got {kind!r}")
        k = len(kernel)
        self.kind = kind
        self.kernel = tuple(int(v) for v in kernel)
        self.strides = tuple(int(v) for v in (strides or [1] * k))
        self.dilations = tuple(int(v) for v in (dilations or [1] * k))
        self.pads = tuple(int(v) for v in (pads or [0] * 2 * k))
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)
        self.p = float(p)
        self.indices = bool(indices) and kind == "max"  # also the flat argmax (int64)
        self.storage_order = int(storage_order)  # 1: the indices count column-major

    def infer(self, x):
        k = len(self.kernel)
        if x.ndim != k + 2:
            raise ShapeError(f"{k}-d pooling needs an (N, C, {k} spatial) input, got "
                             f"{x.shape}")
        if self.kind != "max" and x.dtype.kind != "f":
            raise DTypeError(f"{self.kind} pooling of {x.dtype}: a floating dtype is required")
        out = [window_count(n, kk, s, d, self.pads[i], self.pads[k + i], self.ceil_mode)
               for i, (n, kk, s, d) in enumerate(zip(x.shape[2:], self.kernel, self.strides,
                                                     self.dilations))]
        self.out_spatial = tuple(out)
        y = TensorSpec(x.shape[:2] + tuple(out), x.dtype)
        return [y, TensorSpec(y.shape, np.int64)] if self.indices else [y]

    def padded_shape(self, shape) -> tuple:
        """The input padded by ``pads`` and by what the last (ceil mode) windows need."""
        k = len(self.kernel)
        dims = []
        for i, (n, kk, s, d, o) in enumerate(zip(shape[2:], self.kernel, self.strides,
                                                 self.dilations, self.out_spatial)):
            need = (o - 1) * s + d * (kk - 1) + 1
            dims.append(max(need, n + self.pads[i] + self.pads[k + i]))
        return tuple(shape[:2]) + tuple(dims)

    def counts(self, shape) -> np.ndarray:
        """The divisor of average pooling at each output position (spatial shape)."""
        k = len(self.kernel)
        per_axis = []
        for i, (n, kk, s, d, o) in enumerate(zip(shape[2:], self.kernel, self.strides,
                                                 self.dilations, self.out_spatial)):
            lo, hi = (0, n + self.pads[i] + self.pads[k + i]) if self.count_include_pad \
                else (self.pads[i], self.pads[i] + n)
            taps = np.arange(o)[:, None] * s + np.arange(kk)[None, :] * d
            per_axis.append(((taps >= lo) & (taps < hi)).sum(1))
        c = per_axis[0]
        for a in per_axis[1:]:
            c = np.multiply.outer(c, a)
        return np.maximum(c, 1)

    def attributes(self):
        return {k: v for k, v in vars(self).items() if not k.startswith("_")
                and k not in ("name", "out_spatial")}


def pool_nd(x, kind, kernel, strides=None, dilations=None, pads=None, ceil_mode=False,
            count_include_pad=False, p=2, indices=False, storage_order=0):
    """N-d pooling; with ``indices`` (max only) also the flat index of each maximum in
    ``x`` (the first one among equals; spatial axes column-major with ``storage_order``)."""
    return PoolNd(kind, kernel, strides, dilations, pads, ceil_mode, count_include_pad, p,
                  indices, storage_order)(x)


class Col2Im(Operation):
    """Sum sliding blocks back into an image (ONNX Col2Im, PyTorch's ``fold``): input
    ``(N, C * prod(block), L)``, output ``(N, C, *image)``. Its gradient would be im2col
    (not built here: imported inference graphs use it)."""

    differentiable = False

    def __init__(self, image, block, strides=None, dilations=None, pads=None):
        k = len(block)
        self.image, self.block = tuple(int(v) for v in image), tuple(int(v) for v in block)
        self.strides = tuple(int(v) for v in (strides or [1] * k))
        self.dilations = tuple(int(v) for v in (dilations or [1] * k))
        self.pads = tuple(int(v) for v in (pads or [0] * 2 * k))

    def windows(self) -> tuple:
        k = len(self.block)
        return tuple(window_count(n, b, s, d, self.pads[i], self.pads[k + i], False)
                     for i, (n, b, s, d) in enumerate(zip(self.image, self.block, self.strides,
                                                          self.dilations)))

    def infer(self, x):
        kk = int(np.prod(self.block))
        if x.ndim != 3 or x.shape[1] % kk or x.shape[2] != int(np.prod(self.windows())):
            raise ShapeError(f"Col2Im: input {x.shape} does not hold blocks {self.block} "
                             f"sliding over {self.image}")
        return [TensorSpec((x.shape[0], x.shape[1] // kk) + self.image, x.dtype)]

    def padded_shape(self, n, c) -> tuple:
        k = len(self.block)
        return (n, c) + tuple(i + self.pads[j] + self.pads[k + j]
                              for j, i in enumerate(self.image))
