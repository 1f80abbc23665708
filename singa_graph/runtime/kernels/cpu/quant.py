"""Quantisation kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear (numpy
ufuncs over planned workspace), MatMulInteger and QLinearMatMul (int32 operands in
workspace, numpy's integer matmul), ConvInteger and QLinearConv (a Numba loop accumulating
in int32; padding contributes nothing, as a pad of the zero point does).

Rounding is ``rint`` (ties to even) and the requantisation multiplier is computed in the
scales' dtype, then applied in float64, as ONNX's reference computes it.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from numba import njit, prange

from ....ir import dtypes
from ...registry import carve, carved_bytes, kernel
from .loops import loops, pick


def _limits(dt):
    info = ml_dtypes.iinfo(dt) if dt in dtypes.NARROW_INTS else np.iinfo(dt)
    return info.min, info.max


# ---------------------------------------------------------------------- (de)quantise
def _qdq_specs(op, ins, outs):
    """The staged ``x / scale`` (or ``x - zero``) in the dtype it is computed in, and a
    staged zero point where it is a narrow type numpy cannot compute with."""
    x, z = ins[0], ins[2]
    t = x.dtype if op.type == "QuantizeLinear" and x.dtype in dtypes.FLOATS else np.float32
    specs = [(tuple(x.shape), t)]
    if dtypes.is_narrow(z.dtype):
        specs.append((tuple(z.shape), t))
    return specs


def _x_ws(op, ins, outs):
    return carved_bytes(*_qdq_specs(op, ins, outs))


def _staged(op, ins, outs, ws):
    x, s, z = ins
    t, *zs = carve(ws, *_qdq_specs(op, ins, outs))
    return t, (zs[0] if zs else z)


@kernel("QuantizeLinear", workspace=_x_ws)
def quantize_linear(op, ins, outs, ws):
    (x, s, z), (y,) = ins, outs
    t, zt = _staged(op, ins, outs, ws)
    stage_z = (lambda: np.copyto(zt, z, casting="unsafe")) if zt is not z else (lambda: None)
    if y.dtype in dtypes.FLOAT8_SATURATING or y.dtype == dtypes.float4_e2m1fn:
        info = ml_dtypes.finfo(y.dtype)
        clip = getattr(op, "saturate", True) and y.dtype != dtypes.float4_e2m1fn
        lo, hi = t.dtype.type(float(info.min)), t.dtype.type(float(info.max))

        def float_step():  # no rounding to integers; float8's zero point is 0 (ONNX)
            np.divide(x, s, out=t, casting="unsafe")
            if y.dtype == dtypes.float4_e2m1fn:
                stage_z()
                np.add(t, zt, out=t, casting="unsafe")
            if clip:
                np.clip(t, lo, hi, out=t)
            np.copyto(y, t, casting="unsafe")
        return float_step
    lo, hi = _limits(y.dtype)

    def step():
        stage_z()
        np.divide(x, s, out=t, casting="unsafe")
        np.rint(t, out=t)
        np.add(t, zt, out=t, casting="unsafe")
        np.clip(t, lo, hi, out=t)
        np.copyto(y, t, casting="unsafe")
    return step


@kernel("DequantizeLinear", workspace=_x_ws)
def dequantize_linear(op, ins, outs, ws):
    (x, s, z), (y,) = ins, outs
    t, zt = _staged(op, ins, outs, ws)
    no_zero = x.dtype in dtypes.NARROW_FLOATS  # float8/float4 have no zero point

    def step():
        np.copyto(t, x, casting="unsafe")
        if not no_zero:
            if zt is not z:
                np.copyto(zt, z, casting="unsafe")
            np.subtract(t, zt, out=t, casting="unsafe")
        np.multiply(t, s, out=t, casting="unsafe")
        np.copyto(y, t, casting="unsafe")
    return step


def _dynamic_ws(op, ins, outs):
    return carved_bytes((tuple(ins[0].shape), ins[0].dtype))


@kernel("DynamicQuantizeLinear", workspace=_dynamic_ws)
def dynamic_quantize_linear(op, ins, outs, ws):
    (x,), (y, scale, zero) = ins, outs
    (t,) = carve(ws, (x.shape, x.dtype))
    f32 = np.float32

    def step():
        hi = f32(max(0.0, np.max(x))) if x.size else f32(0)
        lo = f32(min(0.0, np.min(x))) if x.size else f32(0)
        s = f32(1.0 if hi == lo else hi - lo) / f32(255)
        zp = np.rint(max(f32(0), min(f32(255), f32(0) - lo / s)))
        np.divide(x, s, out=t, casting="unsafe")
        np.rint(t, out=t)
        np.add(t, zp, out=t, casting="unsafe")
        np.clip(t, 0, 255, out=t)
        np.copyto(y, t, casting="unsafe")
        scale[...] = s
        zero[...] = zp
    return step


# ---------------------------------------------------------------------- matmul
def _mm_specs(op, ins, outs):
    a, b = ins[0], ins[3] if op.type == "QLinearMatMul" else ins[1]
    specs = [(tuple(a.shape), np.int32), (tuple(b.shape), np.int32)]
    if op.type == "QLinearMatMul":
        y = outs[0]
        scales = np.broadcast_shapes(*(tuple(ins[i].shape) for i in (1, 4, 6)))
        specs += [(tuple(y.shape), np.int32), (tuple(y.shape), np.float64),
                  (scales, ins[1].dtype)]
    return specs


def _mm_ws(op, ins, outs):
    return carved_bytes(*_mm_specs(op, ins, outs))


@kernel("MatMulInteger", workspace=_mm_ws)
def matmul_integer(op, ins, outs, ws):
    (a, b, az, bz), (y,) = ins, outs
    ta, tb = carve(ws, *_mm_specs(op, ins, outs))

    def step():
        np.subtract(a, az, out=ta, dtype=np.int32, casting="unsafe")
        np.subtract(b, bz, out=tb, dtype=np.int32, casting="unsafe")
        np.matmul(ta, tb, out=y)
    return step


@kernel("QLinearMatMul", workspace=_mm_ws)
def qlinear_matmul(op, ins, outs, ws):
    (a, a_s, az, b, b_s, bz, y_s, yz), (y,) = ins, outs
    ta, tb, acc, d, m = carve(ws, *_mm_specs(op, ins, outs))
    lo, hi = _limits(y.dtype)

    def step():
        np.subtract(a, az, out=ta, dtype=np.int32, casting="unsafe")
        np.subtract(b, bz, out=tb, dtype=np.int32, casting="unsafe")
        np.matmul(ta, tb, out=acc)
        np.multiply(a_s, b_s, out=m, casting="unsafe")
        np.divide(m, y_s, out=m, casting="unsafe")
        np.multiply(acc, m, out=d)
        np.add(d, yz, out=d)
        np.rint(d, out=d)
        np.clip(d, lo, hi, out=d)
        np.copyto(y, d, casting="unsafe")
    return step


# ---------------------------------------------------------------------- convolution
def _conv_int(x, xz, w, wz, y, sh, sw, dh, dw, pt, pl, groups, bias, mult, yz, lo, hi,
              requant):
    """int32 accumulation of ``(x - xz) * (w - wz[m])`` over each window (padding adds
    nothing); with ``requant``, ``clip(rint(acc + bias[m]) * mult[m] + yz)``."""
    n_, c_, h_, w_ = x.shape
    m_, cg, kh_, kw_ = w.shape
    oh_, ow_ = y.shape[2], y.shape[3]
    mg = m_ // groups
    per_m = wz.shape[0] > 1
    for nm in prange(n_ * m_):
        n = nm // m_
        m = nm % m_
        c0 = (m // mg) * cg
        wzm = np.int32(wz[m if per_m else 0])
        for oh in range(oh_):
            for ow in range(ow_):
                acc = np.int32(0)
                for c in range(cg):
                    for kh in range(kh_):
                        ih = oh * sh - pt + kh * dh
                        if ih < 0 or ih >= h_:
                            continue
                        for kw in range(kw_):
                            iw = ow * sw - pl + kw * dw
                            if iw < 0 or iw >= w_:
                                continue
                            acc += (np.int32(x[n, c0 + c, ih, iw]) - xz) * \
                                (np.int32(w[m, c, kh, kw]) - wzm)
                if requant:
                    acc += bias[m]
                    r = np.float64(acc) * np.float64(mult[m if mult.shape[0] > 1 else 0]) \
                        + yz
                    r = min(max(r, lo), hi)
                    y[n, m, oh, ow] = np.rint(r)
                else:
                    y[n, m, oh, ow] = acc


_CONV = loops(_conv_int)


def _conv_step(op, x, xz, w, wz, y, bias, mult, yz, requant, before=None):
    (sh, sw), (dh, dw), (pt, pl, _, _) = op.stride, op.dilation, op.padding
    lo, hi = (float(v) for v in _limits(y.dtype))
    fn = pick(_CONV, y.size * w[0].size)
    xz, wz, yz = xz.reshape(-1), wz.reshape(-1), yz.reshape(-1)

    def step():
        if before is not None:
            before()
        fn(x, np.int32(xz[0]), w, wz, y, sh, sw, dh, dw, pt, pl, op.groups, bias, mult,
           np.float64(yz[0]), lo, hi, requant)
    return step


@kernel("ConvInteger")
def conv_integer(op, ins, outs):
    (x, w, xz, wz), (y,) = ins, outs
    none_i, none_f = np.zeros(1, np.int32), np.zeros(1, np.float32)  # unused operands
    return _conv_step(op, x, xz, w, wz, y, none_i, none_f, np.zeros(1), False)


def _mult_spec(ins):
    return np.broadcast_shapes(*(tuple(ins[i].shape) for i in (1, 4, 6))), ins[1].dtype


def _qconv_ws(op, ins, outs):
    return carved_bytes(_mult_spec(ins))


@kernel("QLinearConv", workspace=_qconv_ws)
def qlinear_conv(op, ins, outs, ws):
    (x, xs, xz, w, wsc, wz, ys, yz, b), (y,) = ins, outs
    (mult,) = carve(ws, _mult_spec(ins))
    m_ = w.shape[0]
    bias = b.reshape(-1) if b.size == m_ else np.broadcast_to(b.reshape(-1), (m_,))

    def scales():  # x_s * w_s / y_s in the scales' dtype, one per output channel or one
        np.multiply(xs, wsc, out=mult, casting="unsafe")
        np.divide(mult, ys, out=mult, casting="unsafe")
    return _conv_step(op, x, xz, w, wz, y, bias, mult.reshape(-1), yz, True, scales)
