"""ONNX -> singa_graph: linear quantisation (QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear) and the integer products (MatMulInteger, ConvInteger, QLinearMatMul,
QLinearConv).

Scales and zero points become tensors that broadcast against what they describe: a
per-axis vector is reshaped onto its axis, a blocked one (``block_size``) repeated along it.
A missing zero point is a 0 of the quantised dtype. The float8, float4 and int4/int2
quantised types are ml_dtypes' (see :mod:`singa_graph.ir.dtypes`).
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from .. import ops
from ..errors import DTypeError
from .import_nn import _as_2d, _window
from .program import constant
from .registry import importer


def _onnx_dtype(n, code):
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(code))
    except Exception:  # an ONNX type numpy has no dtype for
        dt = None
    if dt is None or not (dt.kind in "iuf" or dt.name in ops.quant.QUANTISED):
        name = helper.tensor_dtype_to_string(code) if code else "?"
        raise DTypeError(f"{n.op_type} node {n.name!r}: quantised type {name} is not "
                         f"supported ({', '.join(ops.quant.QUANTISED)} are)")
    return dt


def _along(n, i, x, axis, block):
    """Input ``i`` (a scale or a zero point) as a tensor broadcasting against ``x``."""
    t = n.t(i)
    axis = axis % max(x.ndim, 1)
    if block:  # each entry repeated ``block`` times along the axis, cut to x's length
        nb = t.shape[axis]
        t = ops.reshape(t, t.shape[:axis + 1] + (1,) + t.shape[axis + 1:])
        t = ops.broadcast_to(t, t.shape[:axis + 1] + (block,) + t.shape[axis + 2:])
        t = ops.reshape(t, t.shape[:axis] + (nb * block,) + t.shape[axis + 2:])
        if nb * block != x.shape[axis]:
            t = ops.slice(t, [0], [x.shape[axis]], [axis], [1])
        return t
    if t.ndim == 0 or t.size == 1 and t.ndim == 1 and x.shape[axis:axis + 1] != (1,):
        return ops.reshape(t, ()) if t.ndim else t
    if t.ndim == 1:
        shape = [1] * x.ndim
        shape[axis] = t.shape[0]
        return ops.reshape(t, tuple(shape))
    return t


@importer("QuantizeLinear")
def quantize_linear(n):
    x = n.t(0)
    axis, block = n.attr("axis", 1), n.attr("block_size", 0)
    if n.has(2):
        zp = n.t(2)
        dt = zp.dtype
    else:
        dt = _onnx_dtype(n, n.attr("output_dtype", 0) or 2)  # uint8 by default
        zp = constant(np.zeros((), dt))
    if dt.name not in ops.quant.QUANTISED:
        raise DTypeError(f"QuantizeLinear node {n.name!r}: quantised type {dt} is not "
                         "supported")
    scale = _along(n, 1, x, axis, block)
    if n.has(2):
        zp = _along(n, 2, x, axis, block)
    precision = n.attr("precision", 0)
    if precision:
        p = _onnx_dtype(n, precision)
        x, scale = ops.cast(x, p) if x.dtype != p else x, ops.cast(scale, p) \
            if scale.dtype != p else scale
    elif scale.dtype != x.dtype:
        scale = ops.cast(scale, x.dtype)
    return ops.quantize_linear(x, scale, zp, n.attr("saturate", 1))


@importer("DequantizeLinear")
def dequantize_linear(n):
    x = n.t(0)
    axis, block = n.attr("axis", 1), n.attr("block_size", 0)
    scale = _along(n, 1, x, axis, block)
    zp = _along(n, 2, x, axis, block) if n.has(2) else constant(np.zeros((), x.dtype))
    out = n.attr("output_dtype", 0)
    return ops.dequantize_linear(x, scale, zp, _onnx_dtype(n, out) if out else scale.dtype)


@importer("DynamicQuantizeLinear")
def dynamic_quantize_linear(n):
    return list(ops.dynamic_quantize_linear(n.t(0)))


def _lift(a, b):
    """ONNX MatMul's 1-d operands as matrices, and how to drop the added axes after."""
    squeeze = []
    if a.ndim == 1:
        a = ops.reshape(a, (1, a.shape[0]))
        squeeze.append(-2)
    if b.ndim == 1:
        b = ops.reshape(b, (b.shape[0], 1))
        squeeze.append(-1)
    return a, b, squeeze


def _drop(y, squeeze):
    if not squeeze:
        return y
    axes = {a % y.ndim for a in squeeze}
    return ops.reshape(y, tuple(s for i, s in enumerate(y.shape) if i not in axes))


def _row_param(n, i, a, default_dtype):
    """A zero point or scale of ``a``'s rows: a vector becomes a column."""
    if not n.has(i):
        return constant(np.zeros((), default_dtype))
    t = n.t(i)
    if t.ndim == 1 and t.size > 1:
        return ops.reshape(t, (t.shape[0], 1))
    return t


@importer("MatMulInteger")
def matmul_integer(n):
    a, b, squeeze = _lift(n.t(0), n.t(1))
    az = _row_param(n, 2, a, a.dtype)
    bz = n.t(3) if n.has(3) else constant(np.zeros((), b.dtype))
    return _drop(ops.matmul_integer(a, b, az, bz), squeeze)


@importer("QLinearMatMul")
def qlinear_matmul(n):
    a, b, squeeze = _lift(n.t(0), n.t(3))
    a_s, az = _row_param(n, 1, a, np.float32), _row_param(n, 2, a, a.dtype)
    b_s = n.t(4)
    bz = n.t(5)
    y_s, yz = n.t(6), n.t(7)
    return _drop(ops.qlinear_matmul(a, a_s, az, b, b_s, bz, y_s, yz), squeeze)


def _conv_args(n, x, w):
    k = x.ndim - 2
    if k not in (1, 2):
        n.fail(f"{k}-d {n.op_type}")
    strides, dilations, pads = _window(n, x.shape[2:], list(w.shape[2:]))
    return k, dict(stride=strides, padding=pads, dilation=dilations, groups=n.attr("group", 1))


def _per_channel(n, i, m, shape_of, dtype):
    if not n.has(i):
        return constant(np.zeros((), dtype))
    t = n.t(i)
    return ops.reshape(t, shape_of(m)) if t.ndim == 1 and t.size == m and m > 1 else t


def _squeeze_1d(y, k):
    return ops.reshape(y, y.shape[:2] + (y.shape[3],)) if k == 1 else y


@importer("ConvInteger")
def conv_integer(n):
    x, w = n.t(0), n.t(1)
    k, kw = _conv_args(n, x, w)
    m = w.shape[0]
    xz = n.t(2) if n.has(2) else constant(np.zeros((), x.dtype))
    wz = _per_channel(n, 3, m, lambda m: (m,) + (1,) * (w.ndim - 1), w.dtype)
    x2, w2 = _as_2d(x, k), _as_2d(w, k)
    if k == 1 and wz.ndim == 3:
        wz = ops.reshape(wz, (m, 1, 1, 1))
    return _squeeze_1d(ops.conv_integer(x2, w2, xz, wz, **kw), k)


@importer("QLinearConv")
def qlinear_conv(n):
    x, w = n.t(0), n.t(3)
    k, kw = _conv_args(n, x, w)
    m = w.shape[0]
    wz = _per_channel(n, 5, m, lambda m: (m, 1, 1, 1), w.dtype)
    w_s = _per_channel(n, 4, m, lambda m: (1, m, 1, 1), np.float32)
    bias = n.t(8) if n.has(8) else constant(np.zeros((m,), np.int32))
    return _squeeze_1d(ops.qlinear_conv(_as_2d(x, k), n.t(1), n.t(2), _as_2d(w, k), w_s, wz,
                                        n.t(6), n.t(7), bias, **kw), k)
