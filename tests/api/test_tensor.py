"""singa_graph.tensor / device: SINGA's construction forms, numpy round trips, helpers."""
import numpy as np
import pytest

from singa_graph import device, tensor
from singa_graph.ir import Placeholder, Tensor
from singa_graph.random import seed


def test_seed_construction_forms():
    dev = device.create_cpu_device()
    assert dev is device.get_default_device()
    tx = tensor.Tensor((4, 3, 8, 8), dev)  # seed 000/003
    ty = tensor.Tensor((4,), dev, tensor.int32)
    assert tx.shape == (4, 3, 8, 8) and tx.dtype == tensor.float32
    assert ty.dtype == tensor.int32 and ty.device == dev
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    y = np.array([1, 2, 3, 0], dtype=np.int32)
    tx.copy_from_numpy(x)
    ty.copy_from_numpy(y)
    np.testing.assert_array_equal(tensor.to_numpy(tx), x)
    np.testing.assert_array_equal(tensor.to_numpy(ty), y)

    w0 = tensor.Tensor(shape=(2, 3), requires_grad=True, stores_grad=True)  # seed 002
    w0.gaussian(0.0, 0.1)
    b0 = tensor.Tensor(shape=(1, 3), requires_grad=True, stores_grad=True)
    b0.set_value(0.0)
    assert w0.stores_grad and w0.requires_grad and np.abs(w0.data).max() > 0
    assert not b0.data.any()
    inp = tensor.Tensor(device=dev, data=x[:2], stores_grad=False)
    tgt = tensor.Tensor(device=dev, data=y[:2], requires_grad=False, stores_grad=False)
    assert inp.shape == (2, 3, 8, 8) and tgt.dtype == tensor.int32 and not tgt.requires_grad


def test_from_numpy_to_numpy_round_trip_and_dtypes():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tensor.from_numpy(a)
    b = tensor.to_numpy(t)
    np.testing.assert_array_equal(a, b)
    b[0, 0] = 99  # a copy, not a view
    assert t.data[0, 0] == 0
    assert tensor.from_numpy(np.zeros(3)).dtype == tensor.float32  # SINGA: float64 -> float32
    assert tensor.from_numpy(np.arange(3)).dtype == tensor.int32  # SINGA: int64 -> int32
    assert tensor.from_numpy(np.zeros(2, np.float16)).dtype == tensor.float16


def test_size_ndim_callable_and_properties():
    t = tensor.Tensor((2, 3, 4))
    assert t.size == 24 and t.size() == 24
    assert t.ndim == 3 and t.ndim() == 3
    assert t.shape == (2, 3, 4) and t.memsize() == 96


def test_creation_helpers():
    z, o = tensor.zeros((2, 2)), tensor.ones((2, 2))
    assert not z.data.any() and (o.data == 1).all()
    t = tensor.Tensor((3,), dtype=tensor.int32)
    assert tensor.zeros_like(t).dtype == tensor.int32
    assert (tensor.ones_like(t).data == 1).all()
    r = tensor.random((100,))
    assert 0 <= r.data.min() and r.data.max() < 1


def test_random_fills_are_seeded_and_accept_both_orders():
    seed(3)
    a = tensor.gaussian(0.0, 2.0, tensor.Tensor((1000,)))
    seed(3)
    b = tensor.gaussian(tensor.Tensor((1000,)), 0.0, 2.0)
    np.testing.assert_array_equal(a.data, b.data)
    assert abs(a.data.std() - 2.0) < 0.2
    u = tensor.uniform(-1, 1, tensor.Tensor((1000,)))
    assert -1 <= u.data.min() and u.data.max() <= 1
    m = tensor.bernoulli(0.3, tensor.Tensor((1000,)))
    assert set(np.unique(m.data)) <= {0.0, 1.0}


def test_arithmetic_methods_and_inplace():
    a = tensor.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]]))
    b = tensor.from_numpy(np.array([[1.0, 1.0], [2.0, 2.0]]))
    np.testing.assert_allclose(tensor.to_numpy(a + b), [[2, 3], [5, 6]])
    np.testing.assert_allclose(tensor.to_numpy(2 * a - 1), [[1, 3], [5, 7]])
    np.testing.assert_allclose(tensor.to_numpy(a.T), [[1, 3], [2, 4]])
    np.testing.assert_allclose(tensor.to_numpy(a.reshape((4,))), [1, 2, 3, 4])
    np.testing.assert_allclose(tensor.to_numpy(tensor.mult(a, b)), a.data @ b.data)
    np.testing.assert_allclose(tensor.to_numpy(tensor.sum(a, 0)), [4, 6])
    np.testing.assert_allclose(tensor.to_numpy(a > 2), [[0, 0], [1, 1]])
    data = a.data
    a += b  # in place on the data, as SINGA
    a *= 2.0
    assert a.data is data
    np.testing.assert_allclose(a.data, [[4, 6], [10, 12]])
    tensor.axpy(0.5, b, a)
    np.testing.assert_allclose(a.data, [[4.5, 6.5], [11, 13]])
    assert a.l1() == pytest.approx(np.abs(a.data).mean())


def test_copy_from_and_errors():
    t = tensor.Tensor((2, 2))
    t.copy_from(np.ones((2, 2), np.float32))
    t2 = tensor.Tensor((2, 2))
    t2.copy_from(t)
    assert (t2.data == 1).all()
    with pytest.raises(ValueError):
        t.copy_from_numpy(np.ones(5))
    with pytest.raises(ValueError, match="symbolic"):
        tensor.to_numpy(Placeholder((2, 2)))


def test_inplace_on_placeholder_builds_op():
    p = Placeholder((2, 2))
    q = p
    q += 1.0  # symbolic: a graph op, not a write
    assert q is not p and q.creator is not None and q.data is None


def test_cuda_device_available_or_clear_error():
    from singa_graph.errors import DeviceError

    try:
        d = device.create_cuda_gpu()
    except DeviceError as e:  # no GPU runtime: the message says what to use instead
        assert "create_cpu_device" in str(e)
    else:
        assert d.kind == "cuda"


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_,
                                   np.uint8])
def test_holding_is_the_constructor_without_its_checks(dtype):
    # what a plan's results are wrapped in: the same tensor as Tensor(data=a,
    # requires_grad=False), holding the array itself
    a = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    t, ref = Tensor.holding(a), Tensor(data=a, requires_grad=False)
    assert t.data is a
    for k in ("shape", "dtype", "device", "requires_grad", "stores_grad", "creator", "writes"):
        assert getattr(t, k) == getattr(ref, k), k
    assert t.is_concrete and t.name != ref.name


def test_holding_falls_back_to_the_constructor():
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T  # not C-ordered: copied
    t = Tensor.holding(a)
    assert t.data.flags.c_contiguous and np.array_equal(t.data, a)
    t = Tensor.holding([1, 2, 3])  # not an array: converted as the constructor does
    assert isinstance(t.data, np.ndarray) and t.dtype == np.int64 and not t.requires_grad
