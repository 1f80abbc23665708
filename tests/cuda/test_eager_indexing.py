"""Ops whose output shape depends on input values (NonZero, ConstantOfShape) run eagerly on
GPU tensors: the op reads the values through a host copy, the kernel writes on the device."""
import numpy as np

from singa_graph import ops
from singa_graph.ir.tensor import Tensor


def _on(gpu, a):
    t = Tensor(data=np.asarray(a), requires_grad=False)
    t.to_device(gpu)
    return t


def test_nonzero_on_a_gpu_tensor(gpu):
    a = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]], np.float32)
    nz = ops.nonzero(_on(gpu, a))
    assert nz.device == gpu
    np.testing.assert_array_equal(nz.host_data(), np.array(np.nonzero(a)))


def test_constant_of_shape_on_a_gpu_tensor(gpu):
    c = ops.constant_of_shape(_on(gpu, np.array([2, 3], np.int64)), 2.5)
    assert c.device == gpu
    np.testing.assert_array_equal(c.host_data(), np.full((2, 3), 2.5, np.float32))
