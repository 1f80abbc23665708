"""Linear quantisation (ONNX): QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and
the integer products MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.

Scales and zero points are tensors that broadcast against the tensor they describe (a
per-axis or blocked scale is reshaped or repeated by the importer); a missing zero point is
a 0 of the quantised dtype. Products accumulate in int32, exactly, and requantise with
``rint(acc * (s_a * s_b / s_y)) + z_y`` saturated to the output dtype, as ONNX's reference.

None of these ops is differentiable: quantised models are run, not trained, here.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir import dtypes
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import broadcast_shape
from .conv import _ConvBase

__all__ = ["QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
           "QLinearMatMul", "ConvInteger", "QLinearConv", "quantize_linear",
           "dequantize_linear", "dynamic_quantize_linear", "matmul_integer", "qlinear_matmul",
           "conv_integer", "qlinear_conv"]

QUANTISED = ("int8", "uint8", "int16", "uint16", "int32", "int4", "uint4", "int2", "uint2",
             "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
             "float4_e2m1fn")


def _kind(dt) -> str:
    """numpy's kind letter, with the ml_dtypes narrow types as the floats/integers they are."""
    dt = np.dtype(dt)
    if dt in dtypes.NARROW_FLOATS:
        return "f"
    if dt in dtypes.NARROW_INTS:
        return "i"
    return dt.kind


def _need(x, kinds, what, op):
    if _kind(x.dtype) not in kinds:
        raise DTypeError(f"{op}: {what} {x.name} has dtype {x.dtype}; "
                         f"{'an integer' if kinds == 'iu' else 'a floating'} dtype is required")


def _fits(small, big, what):
    if broadcast_shape(small.shape, big.shape) != tuple(big.shape):
        raise ShapeError(f"{what} of shape {small.shape} does not broadcast to {big.shape}")


def _matmul_shape(a, b) -> tuple:
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(f"matmul of integers needs operands of rank >= 2 (the importer "
                         f"lifts vectors), got {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul of {a.shape} and {b.shape}: inner sizes differ")
    return broadcast_shape(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])


class QuantizeLinear(Operation):
    """``saturate(rint(x / scale) + zero_point)`` in ``dtype`` (ties to even). Into float8,
    ``x / scale`` rounded to the format (clipped to its largest finite value when
    ``saturate``; the zero point is 0); into float4_e2m1fn, ``x / scale + zero_point``."""

    differentiable = False

    def __init__(self, dtype="uint8", saturate=True):
        self.dtype = np.dtype(dtype)
        self.saturate = bool(saturate)
        if self.dtype.name not in QUANTISED:
            raise DTypeError(f"QuantizeLinear to {self.dtype}: quantised dtypes are "
                             f"{', '.join(QUANTISED)}")

    def infer(self, x, scale, zero_point):
        _need(x, "f", "x", self.type)
        _need(scale, "f", "scale", self.type)
        if zero_point.dtype != self.dtype:
            raise DTypeError(f"QuantizeLinear: zero point {zero_point.dtype}, output "
                             f"{self.dtype}")
        _fits(scale, x, "scale")
        _fits(zero_point, x, "zero point")
        return [TensorSpec(x.shape, self.dtype)]


class DequantizeLinear(Operation):
    """``(x - zero_point) * scale``, computed in float32, in ``dtype``; float8 and float4
    ``x`` have no zero point (ONNX's is 0)."""

    differentiable = False

    def __init__(self, dtype="float32"):
        self.dtype = np.dtype(dtype)

    def infer(self, x, scale, zero_point):
        if x.dtype.name not in QUANTISED:
            _need(x, "iu", "x", self.type)
        _need(scale, "f", "scale", self.type)
        _fits(scale, x, "scale")
        _fits(zero_point, x, "zero point")
        return [TensorSpec(x.shape, self.dtype)]


class DynamicQuantizeLinear(Operation):
    """uint8 quantisation with the scale and zero point that map ``[min(x, 0), max(x, 0)]``
    onto ``[0, 255]``: outputs ``(y, scale, zero_point)``."""

    differentiable = False

    def infer(self, x):
        _need(x, "f", "x", self.type)
        return [TensorSpec(x.shape, np.uint8), TensorSpec((), x.dtype),
                TensorSpec((), np.uint8)]


class MatMulInteger(Operation):
    """``(a - a_zero) @ (b - b_zero)`` in int32; ``a_zero`` broadcasts to ``a`` (one per
    row), ``b_zero`` to ``b`` (one per column)."""

    differentiable = False

    def infer(self, a, b, a_zero, b_zero):
        for t, w in ((a, "a"), (b, "b"), (a_zero, "a's zero point"), (b_zero, "b's zero point")):
            _need(t, "iu", w, self.type)
        _fits(a_zero, a, "a's zero point")
        _fits(b_zero, b, "b's zero point")
        return [TensorSpec(_matmul_shape(a, b), np.int32)]


class QLinearMatMul(Operation):
    """MatMulInteger requantised: ``saturate(rint(acc * a_s * b_s / y_s) + y_zero)``."""

    differentiable = False

    def infer(self, a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero):
        for t, w in ((a, "a"), (b, "b"), (y_zero, "y's zero point")):
            _need(t, "iu", w, self.type)
        for s in (a_scale, b_scale, y_scale):
            _need(s, "f", "scale", self.type)
        _fits(a_zero, a, "a's zero point")
        _fits(b_zero, b, "b's zero point")
        shape = _matmul_shape(a, b)
        for t, w in ((a_scale, "a's scale"), (b_scale, "b's scale"), (y_scale, "y's scale"),
                     (y_zero, "y's zero point")):
            _fits(t, np.empty(shape, np.bool_), w)
        return [TensorSpec(shape, y_zero.dtype)]


class ConvInteger(_ConvBase):
    """2-d convolution of integers accumulated in int32: ``conv(x - x_zero, w - w_zero)``
    (``w_zero`` one per output channel, shape ``(M, 1, 1, 1)``, or one value)."""

    differentiable = False

    def infer(self, x, w, x_zero, w_zero):
        for t, what in ((x, "x"), (w, "w"), (x_zero, "x's zero point"),
                        (w_zero, "w's zero point")):
            _need(t, "iu", what, self.type)
        _fits(x_zero, x, "x's zero point")
        _fits(w_zero, w, "w's zero point")
        return [TensorSpec(self.output_shape(x.shape, w.shape), np.int32)]


class QLinearConv(_ConvBase):
    """ConvInteger plus an int32 bias, requantised to ``y_zero``'s dtype; ``w_scale`` is
    one value or one per output channel (shape ``(1, M, 1, 1)``)."""

    differentiable = False

    def infer(self, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias):
        for t, what in ((x, "x"), (w, "w"), (y_zero, "y's zero point"), (bias, "bias")):
            _need(t, "iu", what, self.type)
        _fits(x_zero, x, "x's zero point")
        _fits(w_zero, w, "w's zero point")
        shape = self.output_shape(x.shape, w.shape)
        for t, what in ((x_scale, "x's scale"), (w_scale, "w's scale"),
                        (y_scale, "y's scale"), (y_zero, "y's zero point")):
            _fits(t, np.empty(shape, np.bool_), what)
        if bias.shape not in ((), (1,), (shape[1],)):
            raise ShapeError(f"bias of shape {bias.shape} for {shape[1]} output channels")
        return [TensorSpec(shape, y_zero.dtype)]


def quantize_linear(x, scale, zero_point, saturate=True):
    """Quantise ``x`` to ``zero_point``'s dtype (``saturate``: see :class:`QuantizeLinear`)."""
    return QuantizeLinear(zero_point.dtype, saturate)(x, scale, zero_point)


def dequantize_linear(x, scale, zero_point, dtype=None):
    return DequantizeLinear(scale.dtype if dtype is None else dtype)(x, scale, zero_point)


def dynamic_quantize_linear(x):
    return DynamicQuantizeLinear()(x)


def matmul_integer(a, b, a_zero, b_zero):
    return MatMulInteger()(a, b, a_zero, b_zero)


def qlinear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero):
    return QLinearMatMul()(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero)


def conv_integer(x, w, x_zero, w_zero, stride=1, padding=0, dilation=1, groups=1):
    return ConvInteger(stride, padding, dilation, groups)(x, w, x_zero, w_zero)


def qlinear_conv(x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias, stride=1,
                 padding=0, dilation=1, groups=1):
    return QLinearConv(stride, padding, dilation, groups)(
        x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias)
