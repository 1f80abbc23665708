"""ONNX -> singa_graph: convolution (1-d to 3-d, deformable), pooling, normalisation, matrix
products, dropout."""
from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..ir.dtypes import NARROW_FLOATS
from .registry import importer


def _auto_pads(n, spatial, kernel, strides, dilations):
    """ONNX ``pads`` (begins then ends) from ``pads`` or ``auto_pad``."""
    mode = n.attr("auto_pad", "NOTSET")
    k = len(spatial)
    if mode in ("NOTSET", ""):
        return list(n.attr("pads", [0] * 2 * k))
    if mode == "VALID":
        return [0] * 2 * k
    begins, ends = [], []
    for size, kk, s, d in zip(spatial, kernel, strides, dilations):
        total = max((math.ceil(size / s) - 1) * s + (kk - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        b, e = (small, big) if mode == "SAME_UPPER" else (big, small)
        begins.append(b)
        ends.append(e)
    return begins + ends


def _as_2d(x, k):
    """A 1-d spatial (N, C, L) tensor viewed as (N, C, 1, L); 2-d stays."""
    return ops.reshape(x, x.shape[:2] + (1, x.shape[2])) if k == 1 else x


def _window(n, spatial, kernel):
    k = len(kernel)
    strides = list(n.attr("strides", [1] * k))
    dilations = list(n.attr("dilations", [1] * k))
    pads = _auto_pads(n, spatial, kernel, strides, dilations)
    if k == 1:
        return [1] + strides, [1] + dilations, [0, pads[0], 0, pads[1]]
    return strides, dilations, pads


@importer("Conv")
def conv(n):
    x, w = n.t(0), n.t(1)
    k = x.ndim - 2
    kernel = list(w.shape[2:])
    if k > 2:  # 3-d and beyond: the N-d op
        strides = list(n.attr("strides", [1] * k))
        dilations = list(n.attr("dilations", [1] * k))
        pads = _auto_pads(n, x.shape[2:], kernel, strides, dilations)
        y = ops.conv_nd(x, w, strides, dilations, pads, n.attr("group", 1))
        return ops.add(y, ops.reshape(n.t(2), (w.shape[0],) + (1,) * k)) if n.has(2) else y
    if k not in (1, 2):
        n.fail(f"{k}-d convolution")
    strides, dilations, pads = _window(n, x.shape[2:], kernel)
    x2, w2 = _as_2d(x, k), _as_2d(w, k)
    b = n.t(2) if n.has(2) else None
    y = ops.conv2d(x2, w2, b, strides, pads, dilations, n.attr("group", 1))
    return ops.reshape(y, y.shape[:2] + (y.shape[3],)) if k == 1 else y


def _pool(n, is_max):
    x = n.t(0)
    k = x.ndim - 2
    kernel = list(n.attr("kernel_shape"))
    if k not in (1, 2) or any(d != 1 for d in n.attr("dilations", [1] * k)) or \
            x.dtype.kind != "f" or n.n_outputs > 1 or n.attr("storage_order", 0):
        from .import_pool import pool_nd  # 3-d, dilated and integer pooling

        return pool_nd(n, "max" if is_max else "avg")
    strides, _, pads = _window(n, x.shape[2:], kernel)
    kernel2 = [1] + kernel if k == 1 else kernel
    # ceil_mode keeps a last partial window; the op applies onnxruntime's rule for it
    ceil = bool(n.attr("ceil_mode", 0))
    x2 = _as_2d(x, k)
    if is_max:
        y = ops.max_pool2d(x2, kernel2, strides, pads, ceil_mode=ceil)
    else:
        y = ops.avg_pool2d(x2, kernel2, strides, pads, bool(n.attr("count_include_pad", 0)),
                           ceil_mode=ceil)
    return ops.reshape(y, y.shape[:2] + (y.shape[3],)) if k == 1 else y


@importer("MaxPool")
def max_pool(n):
    return _pool(n, True)


@importer("AveragePool")
def average_pool(n):
    return _pool(n, False)


@importer("GlobalAveragePool")
def global_average_pool(n):
    x = n.t(0)
    if x.ndim == 4:
        return ops.global_average_pool(x)
    return ops.mean(x, tuple(range(2, x.ndim)), True)


@importer("GlobalMaxPool")
def global_max_pool(n):
    x = n.t(0)
    if x.ndim != 4:
        n.fail(f"GlobalMaxPool of a {x.ndim}-d input")
    return ops.max_pool2d(x, x.shape[2:], 1, 0)


@importer("BatchNormalization")
def batch_norm(n):
    if n.attr("training_mode", 0) or n.n_outputs > 1:
        return _batch_norm_training(n)
    x = n.t(0)
    scale, bias = n.t(1), n.t(2)
    mean, var = n.buffer(3), n.buffer(4)
    # ONNX weights the running value by momentum; ours weights the batch
    momentum = 1.0 - float(n.attr("momentum", 0.9))
    return ops.batchnorm_2d(x, scale, bias, mean, var, momentum, n.attr("epsilon", 1e-5),
                            n.training)


@importer("Gemm")
def gemm(n):
    a, b = n.t(0), n.t(1)
    c = n.t(2) if n.has(2) else None
    return ops.gemm(a, b, c, n.attr("alpha", 1.0), n.attr("beta", 1.0),
                    bool(n.attr("transA", 0)), bool(n.attr("transB", 0)))


class _Retyped:
    """A node seen with other input tensors (MatMul of narrow floats runs in float32)."""

    def __init__(self, n, inputs):
        self._n, self._inputs = n, inputs

    def t(self, i):
        return self._inputs[i]

    def __getattr__(self, name):
        return getattr(self._n, name)


@importer("MatMul")
def matmul(n):
    a, b = n.t(0), n.t(1)
    if a.dtype in NARROW_FLOATS:  # bfloat16/float8: a float32 product rounded once
        n32 = _Retyped(n, [ops.cast(a, np.float32), ops.cast(b, np.float32)])
        return ops.cast(matmul(n32), a.dtype)
    if a.dtype.kind != "f":
        n.fail("integer MatMul")
    a2 = ops.reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = ops.reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    y = ops.matmul(a2, b2)
    if a.ndim == 1 or b.ndim == 1:  # numpy's rule: the added axis is removed again
        shape = y.shape[:-2] + (() if a.ndim == 1 else y.shape[-2:-1]) + \
            (() if b.ndim == 1 else y.shape[-1:])
        y = ops.reshape(y, shape)
    return y


def _dropout(n, ratio, training):
    x = n.t(0)
    if training and ratio > 0:
        y, mask = ops.Dropout(ratio, True, n.attr("seed"))(x)
        return [y, ops.cast(mask, np.bool_)] if n.n_outputs > 1 else y
    y = ops.identity(x)
    return [y, np.ones(x.shape, np.bool_)] if n.n_outputs > 1 else y


@importer("Dropout", since=1)
def dropout_1(n):
    return _dropout(n, float(n.attr("ratio", 0.5)), n.training and not n.attr("is_test", 0))


@importer("Dropout", since=12)
def dropout_12(n):
    ratio = float(n.const(1, np.float32(0.5)))
    mode = n.const(2)
    training = bool(mode) if mode is not None else n.training
    return _dropout(n, ratio, training)


@importer("Cast")
def cast(n):
    from onnx import helper

    dt = helper.tensor_dtype_to_np_dtype(n.attr("to"))
    return ops.cast(n.t(0), dt, n.attr("saturate", 1), n.attr("round_mode", "up"))


@importer("CastLike")
def cast_like(n):
    return ops.cast(n.t(0), n.t(1).dtype, n.attr("saturate", 1), n.attr("round_mode", "up"))


def _transposed_pads(n, spatial, kernel, strides, dilations, out_pad):
    """``(pads, full sizes)`` of a ConvTranspose; pads may be negative where
    ``output_shape`` asks for more than the full transposed convolution gives."""
    k = len(spatial)
    full = [s * (i - 1) + op + (kk - 1) * d + 1
            for i, kk, s, d, op in zip(spatial, kernel, strides, dilations, out_pad)]
    out_shape = n.attr("output_shape")
    mode = n.attr("auto_pad", "NOTSET")
    if out_shape is None and mode in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [i * s for i, s in zip(spatial, strides)]
    if out_shape is None:
        return list(n.attr("pads", [0] * 2 * k)), full
    out_shape = list(out_shape)[-k:]
    begins, ends = [], []
    for f, o in zip(full, out_shape):
        total = f - o
        small, big = total // 2, total - total // 2
        b, e = (small, big) if mode == "SAME_UPPER" else (big, small)
        begins.append(b)
        ends.append(e)
    return begins + ends, full


@importer("ConvTranspose")
def conv_transpose(n):
    """The gradient of a convolution with respect to its input (the library's
    Conv2dGradInput), plus the bias; negative pads become zero padding of the result."""
    x, w = n.t(0), n.t(1)
    k = x.ndim - 2
    if k < 1:
        n.fail(f"{k}-d transposed convolution")
    kernel = list(w.shape[2:])
    strides = list(n.attr("strides", [1] * k))
    dilations = list(n.attr("dilations", [1] * k))
    out_pad = list(n.attr("output_padding", [0] * k))
    if any(op >= s for op, s in zip(out_pad, strides)):
        n.fail(f"output_padding {out_pad} not below strides {strides}")
    pads, full = _transposed_pads(n, x.shape[2:], kernel, strides, dilations, out_pad)
    inner = [max(p, 0) for p in pads]
    sizes = [f - b - e for f, b, e in zip(full, inner[:k], inner[k:])]
    group = n.attr("group", 1)
    if k > 2:  # the N-d op gives the full output; its pads are cropped here
        y = ops.conv_transpose_nd(x, w, strides, dilations, group, out_pad)
        if any(inner):
            y = ops.slice(y, inner[:k], [b + s for b, s in zip(inner[:k], sizes)],
                          list(range(2, 2 + k)), [1] * k)
        return _tconv_tail(n, y, pads, w, group, k)
    x2, w2 = _as_2d(x, k), _as_2d(w, k)
    if k == 1:
        strides, dilations, inner, sizes = ([1] + strides, [1] + dilations,
                                            [0, inner[0], 0, inner[1]], [1] + sizes)
    y = ops.Conv2dGradInput(strides, inner, dilations, group,
                            x_shape=(x.shape[0], w.shape[1] * group, *sizes))(x2, w2)
    if k == 1:
        y = ops.reshape(y, y.shape[:2] + (y.shape[3],))
    return _tconv_tail(n, y, pads, w, group, k)


def _tconv_tail(n, y, pads, w, group, k):
    """Negative pads as zero padding of the result, then the bias."""
    if min(pads) < 0:
        grow = [0, 0] + [max(-p, 0) for p in pads[:k]] + [0, 0] + [max(-p, 0) for p in pads[k:]]
        y = ops.pad(y, "constant", grow)
    if n.has(2):
        y = ops.add(y, ops.reshape(n.t(2), (w.shape[1] * group,) + (1,) * k))
    return y


def _batch_norm_training(n):
    """ONNX's training-mode BatchNormalization with its running-statistics outputs,
    composed: batch mean and (biased) variance over all axes but 1, the normalisation, and
    ``running * momentum + batch * (1 - momentum)``."""
    from .program import scalar_like

    x = n.t(0)
    axes = tuple(a for a in range(x.ndim) if a != 1)
    chan = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    mean = ops.mean(x, axes, True)
    centred = ops.sub(x, mean)
    var = ops.mean(ops.mul(centred, centred), axes, True)
    eps = scalar_like(n.attr("epsilon", 1e-5), x)
    y = ops.div(centred, ops.sqrt(ops.add(var, eps)))
    y = ops.add(ops.mul(y, ops.reshape(n.t(1), chan)), ops.reshape(n.t(2), chan))
    mom = float(n.attr("momentum", 0.9))
    outs = [y]
    for i, batch in ((3, mean), (4, var)):
        run = ops.mul(n.t(i), scalar_like(mom, x))
        outs.append(ops.add(run, ops.mul(ops.reshape(batch, (x.shape[1],)),
                                         scalar_like(1 - mom, x))))
    return outs


@importer("DeformConv")
def deform_conv(n):
    from .program import constant

    x, w, off = n.t(0), n.t(1), n.t(2)
    k = x.ndim - 2
    if k != 2:
        n.fail(f"{k}-d DeformConv")
    taps = w.shape[2] * w.shape[3]
    og = n.attr("offset_group", 1)
    mask = n.t(4) if n.has(4) else constant(np.ones((x.shape[0], og * taps) + off.shape[2:],
                                                    x.dtype))
    y = ops.DeformConv(n.attr("strides", [1, 1]), n.attr("dilations", [1, 1]),
                       n.attr("pads", [0] * 4), n.attr("group", 1), og)(x, w, off, mask)
    return ops.add(y, ops.reshape(n.t(3), (w.shape[0], 1, 1))) if n.has(3) else y
