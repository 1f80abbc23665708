"""Cast into the narrow ONNX types (bfloat16, float8, float4, int4/2) with ONNX's semantics.

Conversions round to nearest even (``ml_dtypes``' casts). Into the four float8 formats with
``saturate`` (ONNX's default), values beyond the largest finite one, infinities included,
become that value with their sign; NaN stays NaN. Without it they follow the format: to
infinity where it has one, to NaN where it has none. float8_e8m0fnu (a bare power of two)
takes the exponent of the float32 value, rounded as ``round_mode`` says ("up", "nearest",
"down"), NaN and infinity becoming its NaN.
"""
import ml_dtypes
import numba
import numpy as np

from ....ir import dtypes
from ...registry import carve, carved_bytes

_MODES = {"up": 0, "nearest": 1, "down": 2}


def _staged_dtype(x):
    """What a saturating cast clips in: float64 stays, everything else is exact in float32."""
    return np.float64 if x.dtype == np.float64 else np.float32


def workspace_specs(op, x) -> list:
    """``(shape, dtype)`` of the staged copy a cast into float8 needs, or nothing."""
    y = np.dtype(op.dtype)
    if y == dtypes.float8_e8m0fnu:
        return [(tuple(x.shape), np.float32)]
    if y in dtypes.FLOAT8_SATURATING and getattr(op, "saturate", True):
        return [(tuple(x.shape), _staged_dtype(x))]
    return []


def workspace(op, ins, outs) -> int:
    return carved_bytes(*workspace_specs(op, ins[0]))


@numba.njit(cache=True)
def _to_e8m0(bits, out, saturate, mode):
    for i in range(bits.size):
        b = bits[i]
        e = (b >> 23) & 0xFF
        if e == 0xFF:  # NaN or infinity
            out[i] = 0xFF
            continue
        up = False
        if mode == 1:  # nearest: the guard bit, then round, sticky or a normal exponent
            up = (b & 0x400000) != 0 and ((b & 0x200000) != 0 or (b & 0x1FFFFF) != 0 or e > 0)
        elif mode == 0:
            up = (b & 0x7FFFFF) != 0
        if up and saturate and e == 0xFE:
            up = False
        out[i] = (e + 1) & 0xFF if up else e


def cast_step(op, x, y, ws):
    """The step converting ``x`` into ``y`` (any dtypes) as ONNX's Cast does."""
    specs = workspace_specs(op, x)
    if not specs:
        return lambda: np.copyto(y, x, casting="unsafe")
    (s,) = carve(ws, *specs)
    saturate = bool(getattr(op, "saturate", True))
    if y.dtype == dtypes.float8_e8m0fnu:
        bits, out = s.reshape(-1).view(np.uint32), y.reshape(-1).view(np.uint8)
        mode = _MODES[getattr(op, "round_mode", "up")]

        def e8m0():
            np.copyto(s, x, casting="unsafe")
            _to_e8m0(bits, out, saturate, mode)
        return e8m0
    info = ml_dtypes.finfo(y.dtype)
    lo, hi = s.dtype.type(float(info.min)), s.dtype.type(float(info.max))

    def saturating():
        np.copyto(s, x, casting="unsafe")
        np.clip(s, lo, hi, out=s)
        np.copyto(y, s, casting="unsafe")
    return saturating
