"""CudaDevice, tensors on it, and the errors users meet."""
import subprocess
import sys

import numpy as np
import pytest

from singa_graph import device, tensor
from singa_graph.errors import DeviceError


def test_tensor_round_trip_and_in_place_methods(gpu):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tensor.Tensor(data=a, device=gpu)
    assert t.device == gpu and gpu.is_array(t.data)
    np.testing.assert_array_equal(t.to_numpy(), a)
    t.copy_from_numpy(a * 2)
    np.testing.assert_array_equal(tensor.to_numpy(t), a * 2)
    t.set_value(1.5)
    np.testing.assert_array_equal(t.to_numpy(), np.full((3, 4), 1.5, np.float32))
    t += 1.0
    np.testing.assert_array_equal(t.to_numpy(), np.full((3, 4), 2.5, np.float32))
    c = t.clone()
    t.set_value(0)
    assert c.device == gpu and float(c.to_numpy()[0, 0]) == 2.5
    assert float(tensor.Tensor(data=np.array([4.0], np.float32), device=gpu)) == 4.0


def test_to_device_and_to_host_move_the_data(gpu):
    a = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    t = tensor.Tensor(data=a)
    t.to_device(gpu)
    assert t.device == gpu and gpu.is_array(t.data)
    h = tensor.to_host(t)  # a copy on the host; t stays on the GPU
    assert h.device.kind == "cpu" and t.device == gpu
    np.testing.assert_array_equal(h.data, a)
    assert t.to_host() is t and t.device.kind == "cpu" and isinstance(t.data, np.ndarray)
    np.testing.assert_array_equal(t.data, a)


def test_zero_filled_tensor_and_gaussian_fill_live_on_the_device(gpu):
    z = tensor.Tensor((4, 3), gpu)
    assert gpu.is_array(z.data)
    np.testing.assert_array_equal(z.to_numpy(), 0)
    z.gaussian(0.0, 1.0)
    assert gpu.is_array(z.data) and z.to_numpy().std() > 0


def test_singa_constructors(gpu):
    assert device.create_cuda_gpu_on(0) == gpu
    assert device.create_cuda_gpus(1) == [gpu]
    assert device.parse("cuda:0") == gpu and device.parse("cpu").kind == "cpu"
    assert gpu.id() == 0


def test_a_missing_gpu_index_is_refused_clearly(gpu):
    with pytest.raises(DeviceError, match="numbered 0"):
        device.create_cuda_gpu(7)


def test_mixing_devices_in_one_op_is_refused_clearly(gpu):
    a = tensor.Tensor(data=np.ones(3, np.float32), device=gpu)
    b = tensor.Tensor(data=np.ones(3, np.float32))
    with pytest.raises(DeviceError, match="to_device"):
        a + b


def test_without_a_gpu_the_error_names_the_simulator_switch():
    code = ("import os; os.environ.pop('NUMBA_ENABLE_CUDASIM', None)\n"
            "from numba import cuda\n"
            "import sys\n"
            "if cuda.is_available(): sys.exit(3)\n"
            "from singa_graph import device\n"
            "try:\n    device.create_cuda_gpu()\nexcept Exception as e:\n"
            "    print(type(e).__name__, e)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    if r.returncode == 3:
        pytest.skip("this machine has a GPU")
    assert "DeviceError" in r.stdout and "NUMBA_ENABLE_CUDASIM=1" in r.stdout, r.stdout + r.stderr
