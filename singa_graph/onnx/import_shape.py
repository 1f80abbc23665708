"""ONNX -> singa_graph: ops that move or view data (Reshape, Flatten, Transpose, Concat,
Split, Squeeze, Unsqueeze, Expand, Slice, constant Pad, nearest Resize) and the shape
queries (Shape, Size).

Shape, Size and every op whose inputs are all known while tracing are folded to numpy
values (see :class:`.program.Program`); these functions handle tensors computed at run time.
Squeeze, Unsqueeze and unit-step Slice are views or splits, so they are composed from
Reshape and Split.
"""
from __future__ import annotations

import numpy as np

from .. import ops
from .program import constant
from .registry import importer


def _axis(a, ndim):
    return int(a) + ndim if int(a) < 0 else int(a)


@importer("Reshape", since=1)
def reshape_1(n):
    return ops.reshape(n.t(0), [int(s) for s in n.attr("shape")])


@importer("Reshape", since=5)
def reshape_5(n):
    shape = [int(s) for s in n.const(1)]
    if n.attr("allowzero", 0) and 0 in shape:
        n.fail("allowzero=1 with a 0 in the shape")
    return ops.reshape(n.t(0), shape)


@importer("Flatten")
def flatten(n):
    x = n.t(0)
    return ops.flatten(x, _axis(n.attr("axis", 1), x.ndim))


@importer("Transpose")
def transpose(n):
    perm = n.attr("perm")
    return ops.transpose(n.t(0), None if perm is None else [int(p) for p in perm])


@importer("Concat")
def concat(n):
    xs = [n.t(i) for i in range(n.n_inputs) if n.has(i)]
    return ops.cat(xs, _axis(n.attr("axis"), xs[0].ndim))


def _split(n, sizes):
    x = n.t(0)
    ax = _axis(n.attr("axis", 0), x.ndim)
    if sizes is None:
        k = n.attr("num_outputs") or n.n_outputs
        size = x.shape[ax]
        chunk = -(-size // k)
        sizes = [chunk] * (size // chunk) + ([size % chunk] if size % chunk else [])
    return list(ops.split(x, ax, [int(s) for s in sizes]))


@importer("Split", since=1)
def split_1(n):
    return _split(n, n.attr("split"))


@importer("Split", since=13)
def split_13(n):
    s = n.const(1)
    return _split(n, None if s is None else list(s))


def _squeezed(shape, axes):
    if axes is None:
        return [s for s in shape if s != 1]
    axes = {_axis(a, len(shape)) for a in axes}
    return [s for i, s in enumerate(shape) if i not in axes]


@importer("Squeeze", since=1)
def squeeze_1(n):
    x = n.t(0)
    return ops.reshape(x, _squeezed(x.shape, n.attr("axes")))


@importer("Squeeze", since=13)
def squeeze_13(n):
    x = n.t(0)
    axes = n.const(1)
    return ops.reshape(x, _squeezed(x.shape, None if axes is None else list(axes)))


def _unsqueezed(shape, axes):
    out = len(shape) + len(axes)
    axes = sorted(_axis(a, out) for a in axes)
    shape = list(shape)
    for a in axes:
        shape.insert(a, 1)
    return shape


@importer("Unsqueeze", since=1)
def unsqueeze_1(n):
    x = n.t(0)
    return ops.reshape(x, _unsqueezed(x.shape, n.attr("axes")))


@importer("Unsqueeze", since=13)
def unsqueeze_13(n):
    x = n.t(0)
    return ops.reshape(x, _unsqueezed(x.shape, list(n.const(1))))


@importer("Expand")
def expand(n):
    x = n.t(0)
    shape = [int(s) for s in n.const(1)]
    return ops.broadcast_to(x, np.broadcast_shapes(tuple(x.shape), tuple(shape)))


@importer("Shape", since=1)
def shape(n):
    s = np.array(n.shape(0), np.int64)
    start, end = n.attr("start", 0), n.attr("end")
    return s[start:end]


@importer("Size")
def size(n):
    return np.array(int(np.prod(n.shape(0), dtype=np.int64)), np.int64)


@importer("ConstantOfShape")
def constant_of_shape(n):
    from onnx import numpy_helper

    shape = tuple(int(s) for s in n.const(0))
    value = n.attr("value")
    v = numpy_helper.to_array(value).ravel()[0] if value is not None else np.float32(0)
    return np.full(shape, v, dtype=np.asarray(v).dtype)


def _slice(n, starts, ends, axes, steps):
    x = n.t(0)
    axes = list(range(len(starts))) if axes is None else [_axis(a, x.ndim) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    y = x
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st != 1:
            n.fail("Slice with a step other than 1")
        dim = y.shape[a]
        b, e, _ = slice(int(s), int(e), 1).indices(dim)
        e = max(e, b)
        if (b, e) == (0, dim):
            continue
        parts = [p for p in (b, e - b, dim - e)]
        pieces = ops.split(y, a, parts)
        y = pieces[1]
    return y if y is not x else ops.identity(x)


@importer("Slice", since=1)
def slice_1(n):
    return _slice(n, n.attr("starts"), n.attr("ends"), n.attr("axes"), None)


@importer("Slice", since=10)
def slice_10(n):
    def ints(i):
        v = n.const(i)
        return None if v is None else [int(a) for a in v]

    return _slice(n, ints(1), ints(2), ints(3), ints(4))


# ---------------------------------------------------------------------- Pad and Resize
# Constant padding is a Concat with constant blocks (negative pads crop with Split), and
# nearest-neighbour upsampling by whole factors is Reshape -> BroadcastTo -> Reshape; both
# are exact and differentiable. Other modes wait for the op library's pad and upsample.

def _take(y, axis, start, length):
    """``y[..., start:start+length, ...]`` along ``axis`` with a Split."""
    dim = y.shape[axis]
    if (start, length) == (0, dim):
        return y
    parts = [p for p in (start, length, dim - start - length) if p]
    return ops.split(y, axis, parts)[1 if start else 0]


def _pad(n, pads, value, axes=None):
    mode = n.attr("mode", "constant")
    if mode != "constant":
        n.fail(f"Pad mode {mode!r}")
    x = n.t(0)
    axes = list(range(x.ndim)) if axes is None else [_axis(a, x.ndim) for a in axes]
    k = len(axes)
    pads = [int(p) for p in pads]
    y = x
    for a, b, e in zip(axes, pads[:k], pads[k:]):
        if b < 0 or e < 0:
            lo, hi = max(-b, 0), max(-e, 0)
            y = _take(y, a, lo, y.shape[a] - lo - hi)
        pieces = []
        for count in (max(b, 0), None, max(e, 0)):
            if count is None:
                pieces.append(y)
            elif count:
                shape = list(y.shape)
                shape[a] = count
                pieces.append(constant(np.full(shape, value, y.dtype)))
        if len(pieces) > 1:
            y = ops.cat(pieces, a)
    return y if y is not x else ops.identity(x)


@importer("Pad", since=1)
def pad_2(n):
    return _pad(n, n.attr("pads", n.attr("paddings")), n.attr("value", 0.0))


@importer("Pad", since=11)
def pad_11(n):
    value = n.const(2)
    axes = n.const(3)
    return _pad(n, n.const(1), 0 if value is None else np.asarray(value).ravel()[0],
                None if axes is None else list(axes))


_REPEATS = {("half_pixel", "round_prefer_floor"), ("half_pixel", "round_prefer_ceil"),
            ("pytorch_half_pixel", "round_prefer_floor"),
            ("pytorch_half_pixel", "round_prefer_ceil"),
            ("asymmetric", "floor"), ("asymmetric", "round_prefer_floor")}


def _upsample(n, x, out_shape):
    """Nearest-neighbour upsampling by whole factors per axis, as a broadcast."""
    factors = []
    for d, o in zip(x.shape, out_shape):
        if o < d or o % d:
            n.fail(f"resizing {x.shape} to {tuple(out_shape)} (only whole upsampling factors)")
        factors.append(o // d)
    if all(f == 1 for f in factors):
        return ops.identity(x)
    split = []
    for d, f in zip(x.shape, factors):
        split += [d, 1] if f > 1 else [d]
    wide = []
    for d, f in zip(x.shape, factors):
        wide += [d, f] if f > 1 else [d]
    y = ops.broadcast_to(ops.reshape(x, split), wide)
    return ops.reshape(y, [int(o) for o in out_shape])


def _resize(n, scales, sizes, axes=None):
    if n.attr("mode", "nearest") != "nearest":
        n.fail(f"Resize mode {n.attr('mode')!r}")
    key = (n.attr("coordinate_transformation_mode", "half_pixel"),
           n.attr("nearest_mode", "round_prefer_floor"))
    if n.op_type == "Resize" and n.opset >= 11 and key not in _REPEATS:
        n.fail(f"nearest Resize with {key[0]} coordinates and {key[1]} rounding")
    x = n.t(0)
    axes = list(range(x.ndim)) if axes is None else [_axis(a, x.ndim) for a in axes]
    out = list(x.shape)
    if sizes is not None and len(sizes):
        for a, s in zip(axes, sizes):
            out[a] = int(s)
    else:
        for a, s in zip(axes, scales):
            out[a] = int(np.floor(x.shape[a] * float(s)))
    return _upsample(n, x, out)


@importer("Upsample", since=1)
def upsample_7(n):
    return _resize(n, n.attr("scales"), None)


@importer("Upsample", since=9)
def upsample_9(n):
    return _resize(n, n.const(1), None)


@importer("Resize", since=10)
def resize_10(n):
    return _resize(n, n.const(1), None)


@importer("Resize", since=11)
def resize_11(n):
    if n.attr("antialias", 0) or n.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        n.fail("antialias or keep_aspect_ratio_policy")
    axes = n.attr("axes")
    return _resize(n, n.const(2), n.const(3), axes)
