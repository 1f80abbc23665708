import importlib

import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops
from singa_graph import random as sg_random
from singa_graph.passes.autodiff import backward
from singa_graph.runtime.registry import get_kernel
from helpers import eager

rng = np.random.default_rng(4)
dropout_module = importlib.import_module("singa_graph.ops.dropout")  # ops.dropout is the function


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_training_forward_and_mask(dt):
    x = rng.standard_normal((50, 40)).astype(dt)
    y, m = eager(lambda t: ops.Dropout(0.3, seed=1)(t), x)
    assert y.dtype == m.dtype == dt
    assert set(np.unique(m)) <= {dt(0), dt(1 / 0.7)}
    np.testing.assert_allclose(y, x * m, rtol=1e-6)
    assert abs(m.mean() - 1.0) < 0.05  # inverted dropout keeps the expectation
    assert abs((m == 0).mean() - 0.3) < 0.03


def test_same_seed_same_mask_and_fresh_masks_per_step():
    x = rng.standard_normal((8, 8))
    m1 = eager(lambda t: ops.Dropout(0.5, seed=7)(t), x)[1]
    m2 = eager(lambda t: ops.Dropout(0.5, seed=7)(t), x)[1]
    np.testing.assert_array_equal(m1, m2)

    def run_twice():
        y, m = np.empty_like(x), np.empty_like(x)
        step = get_kernel("Dropout")(ops.Dropout(0.5, seed=7), [x], [y, m])
        step()
        first = m.copy()
        step()
        return first, m.copy()

    a1, a2 = run_twice()
    b1, b2 = run_twice()
    assert not np.array_equal(a1, a2)  # one compiled step draws a new mask per run
    np.testing.assert_array_equal(a1, b1)
    np.testing.assert_array_equal(a2, b2)
    np.testing.assert_array_equal(a1, m1)


def test_unseeded_follows_global_seed():
    x = rng.standard_normal((6, 6))
    sg_random.seed(3)
    a = eager(lambda t: ops.Dropout(0.5)(t), x)[1]
    b = eager(lambda t: ops.Dropout(0.5)(t), x)[1]
    sg_random.seed(3)
    c = eager(lambda t: ops.Dropout(0.5)(t), x)[1]
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)


def test_eval_mode_is_identity(monkeypatch):
    x = rng.standard_normal((3, 4))
    op = ops.Dropout(0.5, training=False)
    assert op.seed is None
    np.testing.assert_array_equal(eager(op, x), x)
    np.testing.assert_array_equal(eager(lambda t: ops.dropout(t, 0.9, training=False), x), x)
    monkeypatch.setattr(dropout_module, "training", False)
    np.testing.assert_array_equal(eager(ops.dropout, x), x)
    monkeypatch.setattr(dropout_module, "training", True)
    assert (eager(ops.dropout, rng.standard_normal((8, 8))) == 0).any()


def test_wrapper_returns_y_only():
    y = ops.dropout(sg.Placeholder((2, 3)), 0.2, training=True)
    assert isinstance(y, sg.Tensor) and y.shape == (2, 3)
    assert len(y.creator.outputs) == 2


def test_gradient_is_dy_times_mask():
    x = sg.Parameter(data=rng.standard_normal((5, 6)))
    y, m = ops.Dropout(0.4, seed=2)(x)
    w = rng.standard_normal((5, 6))
    loss = ops.sum(ops.mul(y, sg.Tensor(data=w, requires_grad=False)))
    ((p, g),) = list(backward(loss))
    assert p is x
    np.testing.assert_allclose(g.data, w * m.data, rtol=1e-12)


def test_eval_gradient_passes_through():
    x = sg.Parameter(data=rng.standard_normal((2, 3)))
    loss = ops.sum(ops.dropout(x, training=False))
    ((_, g),) = list(backward(loss))
    np.testing.assert_array_equal(g.data, np.ones((2, 3)))


def test_bad_ratio_and_dtype():
    with pytest.raises(ValueError, match="ratio"):
        ops.Dropout(1.0)
    with pytest.raises(sg.DTypeError, match="Dropout"):
        ops.dropout(sg.Placeholder((2,), dtype="int64"))


def test_compiled_step_reproducible_with_fresh_masks():
    from singa_graph.ir import Graph, building
    from singa_graph.passes import compile

    xv = rng.standard_normal((6, 5)).astype(np.float32)

    def masks():
        with building():
            x = sg.Placeholder((6, 5))
            y, m = ops.Dropout(0.5, seed=11)(x)
            plan = compile(Graph([y, m]), poison=True)
        runs = [plan.run({x: xv}) for _ in range(2)]
        for y_, m_ in runs:
            np.testing.assert_allclose(y_, xv * m_)
        return [m_ for _, m_ in runs]

    a, b = masks(), masks()
    assert not np.array_equal(a[0], a[1])
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
