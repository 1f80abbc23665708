"""Ops that rearrange data (ONNX names and attributes): Shape, Squeeze, Unsqueeze, Slice,
Tile, Pad, Upsample (nearest), DepthToSpace, SpaceToDepth; ``expand`` is BroadcastTo.

Tile and Upsample are copies through broadcast views, and their gradients sum those views
back with Reshape and ReduceSum. Pad's gradient slices the centre and folds the reflected
or repeated borders back onto it, axis by axis.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import broadcast_shape, norm_axes
from .elementwise import add, broadcast_to
from .reduce import sum as _sum
from .shape import Reshape, reshape

__all__ = ["Shape", "Squeeze", "Unsqueeze", "Slice", "SliceGrad", "Tile", "Pad", "Upsample",
           "DepthToSpace", "SpaceToDepth", "shape_of", "squeeze", "unsqueeze", "slice", "tile",
           "expand", "pad", "upsample", "depth_to_space", "space_to_depth"]

_BEGIN = -(2 ** 62)  # a slice end before the first element (ONNX's INT_MIN)


class Shape(Operation):
    """The shape of ``x`` as an int64 vector.

    Recorded like any op, so ``shape(x).creator`` exists as in SINGA; nothing flows back
    to ``x`` (its shape does not depend on its values). SINGA's ``creator.backward(dy)``
    returns the shape of ``dy`` as a list of ints, and so does ours."""

    def infer(self, x):
        self._value = np.array(x.shape, np.int64)
        return [TensorSpec((x.ndim,), np.int64)]

    def gradient(self, inputs, outputs, dys, needs):
        return [None]

    def protocol_gradients(self, dxs, dys):
        dy = dys[0]
        return [int(s) for s in (dy.shape if hasattr(dy, "shape") else np.shape(dy))]


class Squeeze(Reshape):
    """Drop size-1 axes (the given ones, or all when ``axes`` is empty). Aliases its input."""

    def __init__(self, axes=()):
        self.axes = tuple(int(a) for a in axes)

    def infer(self, x):
        if self.axes:
            axes = norm_axes(self.axes, x.ndim)
            bad = [a for a in axes if x.shape[a] != 1]
            if bad:
                raise ShapeError(f"cannot squeeze axes {bad} of shape {x.shape}: size is not 1")
        else:
            axes = tuple(i for i, s in enumerate(x.shape) if s == 1)
        self.shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
        return [TensorSpec(self.shape, x.dtype)]


class Unsqueeze(Reshape):
    """Insert size-1 axes at ``axes`` (positions in the output). Aliases its input."""

    def __init__(self, axes):
        self.axes = tuple(int(a) for a in ([axes] if np.isscalar(axes) else axes))

    def infer(self, x):
        nd = x.ndim + len(self.axes)
        axes = norm_axes(self.axes, nd)
        it = iter(x.shape)
        self.shape = tuple(1 if i in axes else next(it) for i in range(nd))
        return [TensorSpec(self.shape, x.dtype)]


def _slices(shape, starts, ends, axes, steps):
    index = [np.s_[:]] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st == 0:
            raise ShapeError("slice steps cannot be 0")
        index[a] = np.s_[s:e:st]
    return tuple(index)


class Slice(Operation):
    """``x[starts:ends:steps]`` along ``axes`` (ONNX Slice; numpy's clamping)."""

    def __init__(self, starts, ends, axes=None, steps=None):
        self.starts = tuple(int(s) for s in starts)
        self.ends = tuple(int(e) for e in ends)
        self.axes = None if axes is None else tuple(int(a) for a in axes)
        self.steps = None if steps is None else tuple(int(s) for s in steps)

    def infer(self, x):
        axes = tuple(range(len(self.starts))) if self.axes is None else self.axes
        steps = (1,) * len(axes) if self.steps is None else self.steps
        if not len(self.starts) == len(self.ends) == len(axes) == len(steps):
            raise ShapeError(f"starts {self.starts}, ends {self.ends}, axes {self.axes} and "
                             f"steps {self.steps} differ in length")
        if len(axes) and (max(axes) >= x.ndim or min(axes) < -x.ndim):
            raise ShapeError(f"slice axes {axes} out of range for shape {x.shape}")
        axes = tuple(a % x.ndim for a in axes)
        self._index = _slices(x.shape, self.starts, self.ends, axes, steps)
        # the length of range(n)[s] is numpy's (and ONNX's) clamped slice length
        shape = tuple(len(range(n)[s]) for n, s in zip(x.shape, self._index))
        return [TensorSpec(shape, x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [SliceGrad(self, inputs[0].shape)(dys[0])]


class SliceGrad(Operation):
    """Zeros of the sliced input's shape with ``dy`` written at the slice."""

    def __init__(self, of: Slice, shape):
        self.starts, self.ends, self.axes, self.steps = of.starts, of.ends, of.axes, of.steps
        self.shape = tuple(shape)
        self._index = of._index

    def infer(self, dy):
        return [TensorSpec(self.shape, dy.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [Slice(self.starts, self.ends, self.axes, self.steps)(dys[0])]


def _interleave(a, b):
    return tuple(v for pair in zip(a, b) for v in pair)


class Tile(Operation):
    """``numpy.tile``: ``repeats[i]`` copies along axis i (extra leading repeats add axes,
    as in SINGA)."""

    def __init__(self, repeats):
        self.repeats = tuple(int(r) for r in ([repeats] if np.isscalar(repeats) else repeats))

    def infer(self, x):
        if any(r < 0 for r in self.repeats) or len(self.repeats) < x.ndim:
            raise ShapeError(f"repeats {self.repeats} do not fit shape {x.shape}")
        xs = (1,) * (len(self.repeats) - x.ndim) + x.shape
        self._views = (_interleave(self.repeats, xs), _interleave((1,) * len(xs), xs))
        return [TensorSpec(tuple(r * s for r, s in zip(self.repeats, xs)), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        y_view = self._views[0]
        g = _sum(reshape(dys[0], y_view), tuple(range(0, len(y_view), 2)))
        return [reshape(g, inputs[0].shape)]


class Upsample(Operation):
    """Nearest-neighbour upsampling by integer ``scales`` per axis (ONNX Upsample/Resize)."""

    def __init__(self, scales, mode="nearest"):
        if str(mode).lower() != "nearest":
            raise ValueError(f"upsample: only mode 'nearest' is supported, got {mode!r}")
        self.mode = "nearest"
        self.scales = tuple(float(s) for s in scales)
        if any(s < 1 or s != int(s) for s in self.scales):
            raise ValueError(f"upsample: scales must be integers >= 1, got {self.scales}")

    def infer(self, x):
        if len(self.scales) != x.ndim:
            raise ShapeError(f"{len(self.scales)} scales for a {x.ndim}-d input {x.shape}")
        sc = tuple(int(s) for s in self.scales)
        self._views = (_interleave(x.shape, sc), _interleave(x.shape, (1,) * x.ndim))
        return [TensorSpec(tuple(s * n for s, n in zip(sc, x.shape)), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        y_view = self._views[0]
        g = _sum(reshape(dys[0], y_view), tuple(range(1, len(y_view), 2)))
        return [reshape(g, inputs[0].shape)]


class Pad(Operation):
    """Pad with a ``constant``, by reflection (``reflect``, the edge not repeated) or by
    repeating the edge (``edge``). ``pads`` is ONNX's ``[b_1, ..., b_n, e_1, ..., e_n]``."""

    def __init__(self, mode="constant", pads=(), constant=0.0):
        if mode not in ("constant", "reflect", "edge"):
            raise ValueError(f"pad: mode must be constant, reflect or edge, got {mode!r}")
        self.mode, self.pads, self.constant = mode, tuple(int(p) for p in pads), float(constant)

    def infer(self, x):
        n = x.ndim
        if len(self.pads) != 2 * n or any(p < 0 for p in self.pads):
            raise ShapeError(f"pads {self.pads} must be 2 * {n} non-negative ints for {x.shape}")
        for a in range(n):
            b, e = self.pads[a], self.pads[a + n]
            if (b or e) and self.mode != "constant" and x.shape[a] == 0:
                raise ShapeError(f"cannot {self.mode}-pad an empty axis of {x.shape}")
            if self.mode == "reflect" and max(b, e) >= x.shape[a]:
                raise ShapeError(f"reflect pads {b, e} must be smaller than axis {a} of "
                                 f"{x.shape}")
        return [TensorSpec(tuple(s + self.pads[a] + self.pads[a + n]
                                 for a, s in enumerate(x.shape)), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        x, g, n = inputs[0], dys[0], inputs[0].ndim
        for a in reversed(range(n)):
            b, e, size = self.pads[a], self.pads[a + n], x.shape[a]
            if not (b or e):
                continue
            full = g
            g = slice(full, [b], [b + size], [a])
            if self.mode == "constant":
                continue
            # (first, stop) of the reversed border in ``full``, and where it lands in x
            for count, first, stop, at in ((b, b - 1, _BEGIN, 1),
                                           (e, b + size + e - 1, b + size - 1, size - 1 - e)):
                if not count:
                    continue
                part = slice(full, [first], [stop], [a], [-1])
                if self.mode == "edge":  # every border cell copies the edge cell
                    part = _sum(part, (a,), True)
                    at, count = (0 if first == b - 1 else size - 1), 1
                pads = [0] * (2 * n)
                pads[a], pads[a + n] = at, size - at - count
                g = add(g, pad(part, "constant", pads))
        return [g]


class _BlockMove(Operation):
    """``y.reshape(dst6) = x.reshape(src6).transpose(perm)`` for a block size and mode."""

    def __init__(self, blocksize, mode="DCR"):
        self.blocksize, self.mode = int(blocksize), str(mode).upper()
        if self.mode not in ("DCR", "CRD"):
            raise ValueError(f"{self.type}: mode must be DCR or CRD, got {mode!r}")

    def _check(self, x, channels_divisible):
        if x.ndim != 4:
            raise ShapeError(f"expects NCHW input, got shape {x.shape}")
        bs = self.blocksize
        if channels_divisible and x.shape[1] % (bs * bs):
            raise ShapeError(f"{x.shape[1]} channels are not divisible by blocksize^2 = {bs * bs}")
        if not channels_divisible and (x.shape[2] % bs or x.shape[3] % bs):
            raise ShapeError(f"spatial size {x.shape[2:]} is not divisible by blocksize {bs}")


class DepthToSpace(_BlockMove):
    """Move channel blocks into ``blocksize x blocksize`` spatial blocks (ONNX)."""

    def infer(self, x):
        self._check(x, True)
        b, c, h, w = x.shape
        bs, c2 = self.blocksize, x.shape[1] // self.blocksize ** 2
        if self.mode == "DCR":
            self._src, self._perm = (b, bs, bs, c2, h, w), (0, 3, 4, 1, 5, 2)
        else:
            self._src, self._perm = (b, c2, bs, bs, h, w), (0, 1, 4, 2, 5, 3)
        self._dst = (b, c2, h, bs, w, bs)
        return [TensorSpec((b, c2, h * bs, w * bs), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [SpaceToDepth(self.blocksize, self.mode)(dys[0])]


class SpaceToDepth(_BlockMove):
    """The inverse of :class:`DepthToSpace` with the same mode (ONNX's is ``DCR``)."""

    def infer(self, x):
        self._check(x, False)
        b, c, hh, ww = x.shape
        bs = self.blocksize
        h, w = hh // bs, ww // bs
        self._src = (b, c, h, bs, w, bs)
        if self.mode == "DCR":
            self._perm, self._dst = (0, 3, 5, 1, 2, 4), (b, bs, bs, c, h, w)
        else:
            self._perm, self._dst = (0, 1, 3, 5, 2, 4), (b, c, bs, bs, h, w)
        return [TensorSpec((b, c * bs * bs, h, w), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [DepthToSpace(self.blocksize, self.mode)(dys[0])]


def shape_of(x):
    """SINGA's ``shape``: the shape of ``x`` as an int64 tensor."""
    return Shape()(x)


def squeeze(x, axis=()):
    """Remove size-1 axes (``axis``: a list; all size-1 axes when empty)."""
    return Squeeze(() if axis is None else ([axis] if np.isscalar(axis) else axis))(x)


def unsqueeze(x, axis=-1):
    """Insert size-1 axes at the positions ``axis`` (an int or a list)."""
    return Unsqueeze(axis)(x)


def slice(x, starts, ends, axes=None, steps=None):
    """``x[starts:ends:steps]`` along ``axes`` (all leading axes when None)."""
    return Slice(starts, ends, axes, steps)(x)


def tile(x, repeats):
    """``numpy.tile`` of ``x``."""
    return Tile(repeats)(x)


def expand(x, shape):
    """Broadcast ``x`` against ``shape`` (ONNX Expand: the result has the broadcast shape)."""
    return broadcast_to(x, broadcast_shape(x.shape, tuple(int(s) for s in shape)))


def pad(x, mode, pads, constant=0.0):
    """Pad ``x`` (``mode``: constant, reflect or edge; ONNX ``pads``)."""
    return Pad(mode, pads, constant)(x)


def upsample(x, mode, scales):
    """Nearest-neighbour upsampling by integer ``scales`` (one per axis)."""
    return Upsample(scales, mode)(x)


def depth_to_space(x, blocksize, mode="DCR"):
    return DepthToSpace(blocksize, mode)(x)


def space_to_depth(x, blocksize, mode="DCR"):
    return SpaceToDepth(blocksize, mode)(x)
