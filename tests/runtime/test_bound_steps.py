"""Kernel steps bound to fixed arguments (runtime/kernels/cpu/loops.bound): after the
dispatcher's first calls they call the compiled entry point directly, with the same
results; anything that is not a Numba dispatcher is called as it is."""
import numpy as np
import pytest
from numba import njit

from singa_graph.runtime.kernels.cpu.loops import _entry_point, bound


@njit(cache=False)
def _axpy(y, x, a, shape):
    for i in range(y.size):
        y[i] += a * x[i] + shape[0]


def _entry_of(step):
    cells = dict(zip(step.__code__.co_freevars, step.__closure__))
    return cells["entry"].cell_contents


def test_a_bound_step_switches_to_the_entry_point_and_keeps_its_results():
    y, x = np.zeros(5, np.float32), np.arange(5, dtype=np.float32)
    step = bound(_axpy, y, x, np.float32(2), (1, 3))
    step()
    assert _entry_of(step) is None  # a step run once does no lookup
    step()
    assert _entry_of(step) is not None and _entry_of(step) is not _axpy
    step()
    np.testing.assert_array_equal(y, 3 * (2 * x + 1))


def test_arguments_without_a_compiled_version_keep_the_dispatcher():
    y, x = np.zeros(3), np.ones(3)
    _axpy(y, x, 1.0, (0,))
    # a typing the dispatcher never compiled has no entry point
    assert _entry_point(_axpy, (y, x, 1.0, (0, 0))) is None


def test_plain_callables_are_called_as_they_are():
    calls = []
    step = bound(lambda a, b: calls.append(a + b), 1, 2)
    step()
    step()
    step()
    assert calls == [3, 3, 3]


def test_a_step_exposes_its_direct_call_once_settled():
    y, x = np.zeros(5, np.float32), np.arange(5, dtype=np.float32)
    step = bound(_axpy, y, x, np.float32(2), (1, 3))
    step()
    assert step.direct is None  # the entry point is found on the second call
    step()
    fn, args = step.direct
    assert fn is _entry_of(step) and args[0] is y
    fn(*args)
    np.testing.assert_array_equal(y, 3 * (2 * x + 1))
    plain = bound(np.add, x, x, y)
    assert plain.direct[0] is np.add and plain.direct[1][2] is y


def test_run_ready_gives_runs_results_and_falls_back_where_it_must():
    """ExecutionPlan.run_ready (Model's inference hot path) copies the feeds in and calls
    the steps' bare calls once all are settled: the same bits as run(), call after call.
    A plan that writes state takes run(), which checks and refuses what run_ready
    would not."""
    from singa_graph import ops
    from singa_graph.errors import FeedError
    from singa_graph.ir import Graph, Placeholder
    from singa_graph.ir.tensor import Tensor
    from singa_graph.passes import compile
    from state_helpers import CLASSES, batch, make_net

    rng = np.random.default_rng(3)
    x = Placeholder((4, 6), name="x")
    w = Tensor(data=rng.standard_normal((6, 5)).astype(np.float32))
    plan = compile(Graph([ops.relu(ops.matmul(x, w))], inputs=[x]))
    assert plan._ready
    feed = rng.standard_normal((4, 6)).astype(np.float32)
    want = plan.run([feed])[0]
    for _ in range(4):
        got = plan.run_ready([feed])[0]
        np.testing.assert_array_equal(got, want)
        assert got is not plan._fetch_arrays[0]  # a copy, as run() returns
    assert plan._calls is not None and len(plan._calls) == len(plan.steps)

    m = make_net(True, "memory")
    xb, yb = batch(1)
    m(xb, yb)
    assert not m.last_plan._ready
    bad = yb.copy()
    bad[0] = CLASSES
    with pytest.raises(FeedError, match="out of range"):
        m.last_plan.run_ready([xb, bad])
