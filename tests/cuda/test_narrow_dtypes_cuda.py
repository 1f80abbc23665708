"""bfloat16, float8, float4 and int4/int2 are CPU storage types: a GPU kernel meeting one
raises a DTypeError naming it instead of computing garbage."""
import ml_dtypes
import numpy as np
import pytest

from singa_graph import ops
from singa_graph.errors import DTypeError
from singa_graph.ir.tensor import Tensor


def test_cast_into_float8_on_a_gpu_tensor_is_refused(gpu):
    t = Tensor(data=np.arange(4, dtype=np.float32), requires_grad=False)
    t.to_device(gpu)
    with pytest.raises(DTypeError, match="float8_e4m3fn"):
        ops.cast(t, ml_dtypes.float8_e4m3fn)
