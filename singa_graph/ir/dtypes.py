"""Data types: singa_graph uses numpy dtypes directly, under SINGA's names.

The narrow ONNX types (bfloat16, the float8 and float4 formats, int4/uint4, int2/uint2) are
the numpy dtypes of ``ml_dtypes``, as ``onnx.numpy_helper`` gives them: one element a byte
(two for bfloat16), unpacked. They are storage types: CPU kernels convert them and compute
elementwise ops through float32, rounding once; CUDA kernels refuse them.
"""
import ml_dtypes
import numpy as np

from ..errors import DTypeError

float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
bool_ = np.dtype(np.bool_)

FLOATS = (float16, float32, float64)
# every width of integer ONNX models carry: 8/16-bit and unsigned ones hold quantised
# tensors, pixels and masks; int32/int64 remain what the library's own ops produce
INTS = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e4m3fnuz = np.dtype(ml_dtypes.float8_e4m3fnuz)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
float8_e5m2fnuz = np.dtype(ml_dtypes.float8_e5m2fnuz)
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)
float4_e2m1fn = np.dtype(ml_dtypes.float4_e2m1fn)
int4 = np.dtype(ml_dtypes.int4)
uint4 = np.dtype(ml_dtypes.uint4)
int2 = np.dtype(ml_dtypes.int2)
uint2 = np.dtype(ml_dtypes.uint2)
# floats narrower than float16: stored, converted, and computed with through float32
NARROW_FLOATS = (bfloat16, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz,
                 float8_e8m0fnu, float4_e2m1fn)
# the float8 formats that ONNX's Cast ``saturate`` attribute applies to
FLOAT8_SATURATING = (float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz)
NARROW_INTS = (int4, uint4, int2, uint2)
NARROW = NARROW_FLOATS + NARROW_INTS
SUPPORTED = FLOATS + INTS + (bool_,) + NARROW


def as_dtype(d) -> np.dtype:
    """Normalise anything numpy understands (``'float32'``, ``np.float32``, a dtype) to a dtype."""
    try:
        dt = np.dtype(d)
    except TypeError as e:
        raise DTypeError(f"not a dtype: {d!r}") from e
    if dt not in SUPPORTED:
        raise DTypeError(f"unsupported dtype {dt}; supported: {', '.join(map(str, SUPPORTED))}")
    return dt


def is_float(d) -> bool:
    return np.dtype(d) in FLOATS


def is_narrow(d) -> bool:
    """Whether ``d`` is one of the ml_dtypes storage types (bfloat16, float8/4, int4/2)."""
    return np.dtype(d) in NARROW


def compute_dtype(d) -> np.dtype:
    """The dtype a CPU kernel computes a narrow float in (float32), or ``d`` itself."""
    d = np.dtype(d)
    return float32 if d in NARROW_FLOATS or d == float16 else d
