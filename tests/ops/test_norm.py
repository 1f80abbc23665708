import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import singa_graph as sg
from singa_graph import ops
from helpers import check_grad

rng = np.random.default_rng(4)


def params(c, dtype=np.float64):
    return [(rng.standard_normal(c) * s + o).astype(dtype)
            for s, o in [(0.5, 1.0), (0.5, 0.0), (0.3, 0.0), (0.2, 1.0)]]


def np_train(x, scale, bias, rm, rv, momentum, eps):
    """Plain numpy batch norm, training mode, with SINGA's running-stat update."""
    axes = (0,) + tuple(range(2, x.ndim))
    sh = (1, -1) + (1,) * (x.ndim - 2)
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    inv = 1 / np.sqrt(var + eps)
    y = (x - mean.reshape(sh)) * (inv * scale).reshape(sh) + bias.reshape(sh)
    m = x.size // x.shape[1]
    return (y, mean, inv, (1 - momentum) * rm + momentum * mean,
            (1 - momentum) * rv + momentum * var * m / (m - 1))


def run(x, scale, bias, rm, rv, **kw):
    ts = [sg.Tensor(data=a, requires_grad=False) for a in (x, scale, bias, rm, rv)]
    with sg.ir.no_grad():
        out = ops.BatchNorm2d(**kw)(*ts)
    return tuple(o.data for o in out) if isinstance(out, tuple) else out.data


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batchnorm_training_forward_and_running_stats(dtype, shape):
    x = (rng.standard_normal(shape) * 2 + 3).astype(dtype)
    scale, bias, rm, rv = params(shape[1], dtype)
    ref = np_train(x.astype(np.float64), scale, bias, rm, rv, 0.9, 1e-5)
    y, mean, inv = run(x, scale, bias, rm, rv, momentum=0.9, eps=1e-5)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, want in zip((y, mean, inv, rm, rv), ref):  # rm, rv were updated in place
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batchnorm_eval_matches_onnx(dtype):
    x = rng.standard_normal((3, 4, 5, 5)).astype(dtype)
    scale, bias, rm, rv = params(4, dtype)
    rm0, rv0 = rm.copy(), rv.copy()
    y = run(x, scale, bias, rm, rv, eps=1e-3, training=False)
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    ref = ReferenceEvaluator(node).run(None, dict(x=x, s=scale, b=bias, m=rm, v=rv))[0]
    np.testing.assert_allclose(y, ref, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)
    np.testing.assert_array_equal(rm, rm0)  # eval leaves the running stats alone
    np.testing.assert_array_equal(rv, rv0)


def test_batchnorm_running_stats_accumulate():
    scale, bias, rm, rv = params(2)
    rm[:], rv[:] = 0, 1
    t = [sg.Tensor(data=a, requires_grad=False) for a in (scale, bias, rm, rv)]
    for _ in range(3):
        x = rng.standard_normal((5, 2, 3, 3)) + 1
        want = np_train(x, scale, bias, rm.copy(), rv.copy(), 0.1, 1e-5)
        ops.batchnorm_2d(sg.Tensor(data=x, requires_grad=False), *t, momentum=0.1)
        np.testing.assert_allclose(t[2].data, want[3], rtol=1e-12)
        np.testing.assert_allclose(t[3].data, want[4], rtol=1e-12)


@pytest.mark.parametrize("shape", [(3, 2, 3, 3), (5, 3)])
def test_batchnorm_training_gradients(shape):
    x = rng.standard_normal(shape) * 1.5 + 0.5
    scale, bias, rm, rv = params(shape[1])
    check_grad(ops.batchnorm_2d, x, scale, bias, rm, rv, wrt=[0, 1, 2])


def test_batchnorm_eval_gradients():
    x = rng.standard_normal((2, 3, 3, 3))
    scale, bias, rm, rv = params(3)
    check_grad(lambda *t: ops.batchnorm_2d(*t, training=False), x, scale, bias, rm, rv,
               wrt=[0, 1, 2])


def test_batchnorm_mutates_only_in_training():
    assert ops.BatchNorm2d().mutates == (3, 4)
    assert ops.BatchNorm2d(training=False).mutates == ()
    assert "mutates" not in ops.BatchNorm2d().attributes()


def test_batchnorm_graph_mode_outputs():
    ins = [sg.Placeholder((8, 4, 6, 6))] + [sg.Placeholder((4,)) for _ in range(4)]
    y, mean, inv = ops.BatchNorm2d()(*ins)
    assert (y.shape, mean.shape, inv.shape) == ((8, 4, 6, 6), (4,), (4,))
    assert ops.batchnorm_2d(*ins, training=False).shape == (8, 4, 6, 6)


def test_batchnorm_shape_errors():
    x = sg.Placeholder((2, 4, 3, 3))
    c = [sg.Placeholder((4,)) for _ in range(3)]
    with pytest.raises(sg.ShapeError, match=r"BatchNorm2d .*\(3,\).*\(2, 4, 3, 3\)"):
        ops.batchnorm_2d(x, sg.Placeholder((3,)), *c)
    with pytest.raises(sg.ShapeError, match=r"BatchNorm2d .*\(4,\)"):
        ops.batchnorm_2d(sg.Placeholder((4,)), *c, sg.Placeholder((4,)))


def test_batchnorm_parallel_loops_match_serial(monkeypatch):
    from singa_graph.runtime.kernels.cpu import loops as loops_mod

    x, dy = rng.standard_normal((3, 4, 3, 2)), rng.standard_normal((3, 4, 3, 2))
    scale, bias, rm, rv = params(4)

    def all_outputs():
        stats = [rm.copy(), rv.copy()]
        y, mean, inv = run(x, scale, bias, *stats)
        ev = run(x, scale, bias, rm, rv, training=False)
        ts = [sg.Tensor(data=a, requires_grad=False) for a in (dy, x, scale, mean, inv)]
        grads = [g.data for g in ops.BatchNorm2dGrad()(*ts)]
        return [y, mean, inv, *stats, ev, *grads]

    want = all_outputs()
    monkeypatch.setattr(loops_mod, "PARALLEL_WORK", 0)
    for got, r in zip(all_outputs(), want):
        np.testing.assert_allclose(got, r, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("shape", [(3, 5, 2, 3), (2, 1024, 2, 2), (1, 7, 1, 1), (4, 3, 9)])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_eval_kernel_is_the_formula_bit_for_bit_on_any_thread_count(shape, relu, threads):
    """Eval mode: ``x * a + b`` in float32, with ``a = scale / sqrt(var + eps)`` and ``b =
    bias - mean * a`` taken in float64 and rounded to float32, then the ReLU; whichever
    thread takes which planes (the split falls inside a channel's run of planes)."""
    import numba

    from singa_graph.runtime import threads as policy
    from singa_graph.runtime.registry import bind, workspace_bytes

    rng = np.random.default_rng(len(shape) + shape[1])
    c = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    scale, bias, rm = (rng.standard_normal(c).astype(np.float32) for _ in range(3))
    rv = rng.uniform(0.1, 2.0, c).astype(np.float32)
    op = ops.BatchNorm2d(momentum=0.1, eps=1e-5, training=False, relu=relu)
    y = np.full(shape, np.nan, np.float32)
    ins = [x, scale, bias, rm, rv]
    policy.apply()
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        step = bind(op, ins, [y], ws=np.empty(workspace_bytes(op, ins, [y]), np.uint8))
        step()
        step()
    finally:
        numba.set_num_threads(before)
    a = scale.astype(np.float64) / np.sqrt(rv.astype(np.float64) + 1e-5)
    b = (bias - rm.astype(np.float64) * a).astype(np.float32)
    per_channel = (1, c) + (1,) * (len(shape) - 2)
    want = x * a.astype(np.float32).reshape(per_channel) + b.reshape(per_channel)
    assert want.dtype == np.float32
    np.testing.assert_array_equal(y, np.maximum(want, np.float32(0)) if relu else want)
