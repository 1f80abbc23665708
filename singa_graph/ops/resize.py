"""Resize: separable interpolation (nearest, linear, cubic; antialiased downsampling; every
ONNX coordinate mode, ``exclude_outside`` and ``tf_crop_and_resize``'s extrapolation).

Resizing one axis from ``L`` to ``O`` entries is a linear map, an ``(O, L)`` matrix that
depends on the sizes and the mode only; :func:`axis_weights` builds it once, while the
graph is built, with the coefficients of ONNX's specification. The op then applies one
matrix per resized axis (a batched matrix product per axis), and its gradient applies their
transposes in reverse order. Rows whose source lies outside ``roi`` hold no weight and take
the extrapolation value.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float

__all__ = ["Resize", "AxisMatmul", "axis_weights", "resize", "axis_matmul"]


def _source_coords(mode, y, scale, n_in, out_float, n_out, roi):
    """Where each output index ``y`` samples the input, and which ones lie outside."""
    outside = None
    if mode == "align_corners":
        x = np.zeros(n_out) if out_float == 1 else y * (n_in - 1) / (out_float - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        r0, r1 = roi
        x = (np.full(n_out, (r1 - r0) * (n_in - 1) / 2) if out_float == 1
             else y * (r1 - r0) * (n_in - 1) / (out_float - 1))
        x = x + r0 * (n_in - 1)
        outside = (x < 0) | (x > n_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if out_float == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / out_float)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")
    return x, outside


def _cubic(t, a):
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t * t + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t * t + 8 * a * t - 4 * a
    return 0.0


def _coeffs(mode, ratio, scale, antialias, cubic_a, nearest):
    """The taps' weights for a source at ``ratio`` in (0, 1] past the left neighbour."""
    if mode == "nearest":
        if ratio == 1:
            return np.array([0.0, 1.0])
        pick = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                "floor": False, "ceil": True}[nearest]
        return np.array([0.0, 1.0]) if pick else np.array([1.0, 0.0])
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(math.floor(-1 / s) + 1)
        c = np.clip(1 - np.abs((np.arange(start, 2 - start) - ratio) * s), 0, 1)
        return c / c.sum()
    if not antialias:
        return np.array([_cubic(ratio + 1, cubic_a), _cubic(ratio, cubic_a),
                         _cubic(1 - ratio, cubic_a), _cubic(2 - ratio, cubic_a)])
    s = min(scale, 1.0)
    start = int(math.floor(-2 / s) + 1)
    c = np.array([_cubic(s * (i - ratio), cubic_a) for i in range(start, 2 - start)])
    return c / c.sum()


def axis_weights(n_in, n_out, scale, mode="nearest", coord="half_pixel",
                 nearest="round_prefer_floor", cubic_a=-0.75, antialias=False,
                 exclude_outside=False, roi=(0.0, 1.0)):
    """``(W, outside)``: the ``(n_out, n_in)`` float64 matrix resizing one axis, and the
    boolean rows that take the extrapolation value (or None)."""
    y = np.arange(n_out, dtype=np.float64)
    x, outside = _source_coords(coord, y, scale, n_in, scale * n_in, n_out, roi)
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        if outside is not None and outside[i]:
            continue
        base = math.floor(x[i])
        ratio = 1.0 if x[i] == base else x[i] - base
        c = _coeffs(mode, ratio, scale, antialias, cubic_a, nearest)
        n = len(c)
        # the n taps nearest x (ties to the smaller index), as ONNX's reference picks them
        pad = math.ceil(n / 2)
        xp = x[i] + pad
        p = math.floor(xp)
        frac = xp - p
        if n % 2 == 0:
            start = p + (-(n // 2) if frac == 0 else -(n // 2) + 1)
        else:
            start = p + (-((n - 1) // 2) if frac <= 0.5 else -((n - 1) // 2) + 1)
        idx = start + np.arange(n) - pad
        if exclude_outside:
            c = np.where((idx < 0) | (idx >= n_in), 0.0, c)
            c = c / (c.sum() or 1.0)
        np.add.at(w[i], np.clip(idx, 0, n_in - 1), c)  # edge padding: clamp the taps
    return w, outside


class Resize(Operation):
    """Apply ``weights[k]`` (``(O, L)``) along ``axes[k]`` in turn; rows in ``outside[k]``
    take ``fill``. Built by :func:`resize` and by ONNX's Resize/Upsample import."""

    def __init__(self, axes, weights, outside=None, fill=0.0):
        self.axes = tuple(int(a) for a in axes)
        self.weights = tuple(np.asarray(w, np.float64) for w in weights)
        self.outside = tuple(None if m is None or not np.any(m) else np.asarray(m, bool)
                             for m in (outside or [None] * len(self.axes)))
        self.fill = float(fill)

    def infer(self, x):
        need_float(x)
        shape = list(x.shape)
        for a, w in zip(self.axes, self.weights):
            if not 0 <= a < x.ndim or w.shape[1] != shape[a]:
                raise ShapeError(f"resize: a weight of shape {w.shape} for axis {a} of "
                                 f"{x.shape}")
            shape[a] = w.shape[0]
        return [TensorSpec(tuple(shape), x.dtype)]

    def stage_shapes(self, shape):
        """The shape after each stage (the kernel's intermediate buffers)."""
        out, shape = [], list(shape)
        for a, w in zip(self.axes, self.weights):
            shape[a] = w.shape[0]
            out.append(tuple(shape))
        return out

    def gradient(self, inputs, outputs, dys, needs):
        # zero the rows that took the fill: no gradient flows through them
        ws = [w if m is None else np.where(m[:, None], 0.0, w)
              for w, m in zip(self.weights, self.outside)]
        return [type(self)(self.axes[::-1], [w.T for w in ws[::-1]])(dys[0])]

    def attributes(self):
        return {"axes": self.axes, "shapes": [w.shape for w in self.weights],
                "fill": self.fill}


class AxisMatmul(Resize):
    """A fixed linear map along axes: ``weights[k]`` applied along ``axes[k]`` in turn (the
    DFT and STFT of real-represented complex signals are such maps). Its gradient applies
    the transposed matrices."""


def axis_matmul(x, axes, weights):
    """``x`` with ``weights[k]`` (shape ``(O, L)``) applied along ``axes[k]``."""
    return AxisMatmul(axes, weights)(x)


def resize(x, sizes, mode="linear", coord="half_pixel", **kw):
    """``x`` resized to ``sizes`` (one per axis) with ONNX Resize's modes (see
    :func:`axis_weights` for the keywords)."""
    axes, ws = [], []
    for a, (n_in, n_out) in enumerate(zip(x.shape, sizes)):
        if n_in != n_out:
            axes.append(a)
            ws.append(axis_weights(n_in, int(n_out), n_out / n_in, mode, coord, **kw)[0])
    return Resize(axes, ws)(x)
