"""ONNX -> singa_graph: ops that move or view data (Reshape, Flatten, Transpose, Concat,
Split, Squeeze, Unsqueeze, Expand, Slice, Tile, Pad, Resize/Upsample, DepthToSpace,
SpaceToDepth) and the shape queries (Shape, Size).

Shape, Size and every op whose inputs are all known while tracing are folded to numpy
values (see :class:`.program.Program`); these functions handle tensors computed at run time.
"""
from __future__ import annotations

import numpy as np

from .. import ops
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
        # a literal 0 (so the data is empty): flat first, where only the first entry of
        # the shape can copy a dimension, and that one is 0
        return ops.reshape(ops.reshape(n.t(0), (-1,)), shape)
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


@importer("Squeeze", since=1)
def squeeze_1(n):
    return ops.squeeze(n.t(0), n.attr("axes") or ())  # no axes or []: every size-1 axis


@importer("Squeeze", since=13)
def squeeze_13(n):
    axes = n.const(1)
    if axes is not None and len(axes) == 0:  # an empty axes input squeezes nothing
        return ops.identity(n.t(0))
    return ops.squeeze(n.t(0), () if axes is None else [int(a) for a in axes])


@importer("Unsqueeze", since=1)
def unsqueeze_1(n):
    return ops.unsqueeze(n.t(0), [int(a) for a in n.attr("axes")])


@importer("Unsqueeze", since=13)
def unsqueeze_13(n):
    return ops.unsqueeze(n.t(0), [int(a) for a in np.ravel(n.const(1))])


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
    if axes is not None:
        axes = [_axis(a, x.ndim) for a in axes]
    return ops.slice(x, starts, ends, axes, steps)


@importer("Slice", since=1)
def slice_1(n):
    return _slice(n, n.attr("starts"), n.attr("ends"), n.attr("axes"), None)


@importer("Slice", since=10)
def slice_10(n):
    def ints(i):
        v = n.const(i)
        return None if v is None else [int(a) for a in v]

    return _slice(n, ints(1), ints(2), ints(3), ints(4))


@importer("Tile")
def tile(n):
    return ops.tile(n.t(0), [int(r) for r in n.const(1)])


@importer("DepthToSpace")
def depth_to_space(n):
    return ops.depth_to_space(n.t(0), n.attr("blocksize"), n.attr("mode", "DCR"))


@importer("SpaceToDepth")
def space_to_depth(n):
    return ops.space_to_depth(n.t(0), n.attr("blocksize"), n.attr("mode", "DCR"))


# ---------------------------------------------------------------------- Pad and Resize

def _wrap(n, x, begins, ends):
    """Wrap padding as Slice + Concat: the last ``b`` entries before, the first ``e``
    after (pads up to the axis length)."""
    for a, (b, e) in enumerate(zip(begins, ends)):
        if not (b or e):
            continue
        if max(b, e) > x.shape[a]:
            n.fail(f"wrap padding {b, e} longer than axis {a} of {x.shape}")
        pieces = [ops.slice(x, [-b], [x.shape[a]], [a])] if b else []
        pieces.append(x)
        pieces += [ops.slice(x, [0], [e], [a])] if e else []
        x = ops.cat(pieces, a)
    return x


def _pad(n, pads, value, axes=None):
    x = n.t(0)
    mode = n.attr("mode", "constant")
    axes = list(range(x.ndim)) if axes is None else [_axis(a, x.ndim) for a in axes]
    k = len(axes)
    begins, ends = [0] * x.ndim, [0] * x.ndim
    for a, b, e in zip(axes, pads[:k], pads[k:]):
        begins[a], ends[a] = int(b), int(e)
    y = x
    if min(begins + ends) < 0:  # negative pads crop
        y = ops.slice(y, [max(-b, 0) for b in begins],
                      [s - max(-e, 0) for s, e in zip(x.shape, ends)])
        begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
    if not any(begins + ends):
        return y if y is not x else ops.identity(x)
    if mode == "wrap":
        return _wrap(n, y, begins, ends)
    if mode not in ("constant", "reflect", "edge"):
        n.fail(f"Pad mode {mode!r}")
    if mode == "reflect" and any((b or e) and max(b, e) >= s
                                 for b, e, s in zip(begins, ends, y.shape)):
        n.fail(f"reflect padding {begins + ends} as long as an axis of {y.shape}")
    if mode != "constant" and any((b or e) and s == 0 for b, e, s in zip(begins, ends,
                                                                           y.shape)):
        n.fail(f"{mode} padding of an empty axis of {y.shape}")
    return ops.pad(y, mode, begins + ends, value)


@importer("Pad", since=1)
def pad_2(n):
    return _pad(n, n.attr("pads", n.attr("paddings")), n.attr("value", 0.0))


@importer("Pad", since=11)
def pad_11(n):
    value = n.const(2)
    axes = n.const(3)
    return _pad(n, [int(p) for p in n.const(1)],
                0 if value is None else np.asarray(value).ravel()[0],
                None if axes is None else list(axes))


_REPEATS = {("half_pixel", "round_prefer_floor"), ("half_pixel", "round_prefer_ceil"),
            ("pytorch_half_pixel", "round_prefer_floor"),
            ("pytorch_half_pixel", "round_prefer_ceil"),
            ("asymmetric", "floor"), ("asymmetric", "round_prefer_floor")}


def _resize(n, scales, sizes, axes=None, roi=None):
    """Resize/Upsample. Nearest resizing by whole factors under the coordinate modes and
    rounding of ``_REPEATS`` repeats every entry: the library's Upsample. Everything else
    is the separable Resize op (:mod:`singa_graph.ops.resize`)."""
    x = n.t(0)
    r = x.ndim
    axes = list(range(r)) if axes is None else [_axis(a, r) for a in axes]
    mode = n.attr("mode", "nearest")
    if mode == "bilinear":  # Upsample-7's older name
        mode = "linear"
    if mode not in ("nearest", "linear", "cubic"):
        n.fail(f"Resize mode {mode!r}")
    legacy = n.op_type == "Upsample" or n.opset < 11
    coord = "asymmetric" if legacy else n.attr("coordinate_transformation_mode",
                                                "half_pixel")
    nearest = "floor" if legacy else n.attr("nearest_mode", "round_prefer_floor")
    out, factor = list(x.shape), [1.0] * r
    if sizes is not None and len(sizes):
        for a, s in zip(axes, sizes):
            out[a], factor[a] = int(s), int(s) / x.shape[a] if x.shape[a] else 1.0
        policy = n.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            common = pick(factor[a] for a in axes)
            for a in axes:
                factor[a], out[a] = common, int(common * x.shape[a] + 0.5)
    else:
        for a, s in zip(axes, scales):
            factor[a], out[a] = float(s), int(x.shape[a] * float(s))
    boxes = {}
    if coord == "tf_crop_and_resize":
        roi = np.asarray(roi, np.float64).ravel()
        k = len(roi) // 2
        for i, a in enumerate(axes if k == len(axes) else range(r)):
            boxes[a] = (float(roi[i]), float(roi[k + i]))
    if (mode == "nearest" and (legacy or (coord, nearest) in _REPEATS) and not boxes
            and all(o >= d > 0 and o % d == 0 and f == o // d
                    for d, o, f in zip(x.shape, out, factor))):
        factors = [o // d for d, o in zip(x.shape, out)]
        if all(f == 1 for f in factors):
            return ops.identity(x)
        return ops.upsample(x, "nearest", factors)
    if x.dtype.kind != "f":
        n.fail(f"{mode} Resize of {x.dtype} data other than repeating entries")
    use, weights, outside = [], [], []
    for a in range(r):
        box = boxes.get(a, (0.0, 1.0))
        if out[a] == x.shape[a] and np.isclose(factor[a], 1.0) and box == (0.0, 1.0):
            continue
        if x.shape[a] == 0 or out[a] == 0:
            n.fail(f"resizing an empty axis ({x.shape} to {tuple(out)})")
        w, m = ops.axis_weights(x.shape[a], out[a], factor[a], mode, coord, nearest,
                                float(n.attr("cubic_coeff_a", -0.75)),
                                bool(n.attr("antialias", 0)) and mode != "nearest",
                                bool(n.attr("exclude_outside", 0)), box)
        use.append(a)
        weights.append(w)
        outside.append(m)
    if not use:
        return ops.identity(x)
    return ops.Resize(use, weights, outside, float(n.attr("extrapolation_value", 0.0)))(x)


@importer("Upsample", since=1)
def upsample_1(n):
    x = n.t(0)
    scales = [1.0] * (x.ndim - 2) + [n.attr("height_scale"), n.attr("width_scale")]
    return _resize(n, scales, None)


@importer("Upsample", since=7)
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
    roi = n.const(1) if n.has(1) else None
    return _resize(n, n.const(2), n.const(3), n.attr("axes"), roi)


@importer("Range")
def range_(n):
    """Range's output shape is its bounds' values, so they must be known while building
    (constants, shapes, or fed inputs that then compile a plan per value)."""
    start, limit, delta = (np.asarray(n.const(i)) for i in range(3))
    return np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)
