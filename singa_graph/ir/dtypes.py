"""Data types: singa_graph uses numpy dtypes directly, under SINGA's names."""
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
SUPPORTED = FLOATS + INTS + (bool_,)


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
