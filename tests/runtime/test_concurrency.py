"""Threads: different models train in different threads at once (graph and eager mode) and
match their single-threaded results bit for bit; the first use from two threads of a fresh
process works; one model called from two threads serialises its steps."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from singa_graph import opt, zoo
from singa_graph import random as sg_random
from singa_graph.ir.op import building, is_building, no_grad
from state_helpers import assert_same

STEPS = 3
ROUNDS = 20


def _model(kind, use_graph):
    sg_random.seed(kind)
    if kind == 0:
        m = zoo.MLP(hidden=(16,), num_classes=4)
        m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    else:
        m = zoo.MLP(hidden=(12, 8), num_classes=4)
        m.set_optimizer(opt.Adam(lr=0.01))
    m.compile([np.zeros((6, 10), np.float32)], is_train=True, use_graph=use_graph)
    return m


def _data(kind):
    rng = np.random.default_rng(100 + kind)
    return [(rng.standard_normal((6, 10)).astype(np.float32),
             rng.integers(0, 4, 6).astype(np.int32)) for _ in range(STEPS)]


def _train(m, data):
    losses = [m(x, y)[1].data.copy() for x, y in data]
    state = {k: t.data.copy() for k, t in m.get_states().items()}
    state.update({f"opt/{k}": t.data.copy() for k, t in m.optimizer.state_tensors().items()})
    state.update({f"loss{i}": v for i, v in enumerate(losses)})
    return state


@pytest.fixture(autouse=True)
def _switch_often():
    """Switch threads every microsecond (not every 5 ms), so that steps and traces of
    different threads really interleave."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _run_threads(fns):
    errors, results = [], [None] * len(fns)
    barrier = threading.Barrier(len(fns))

    def wrap(i, fn):
        try:
            barrier.wait()
            results[i] = fn()
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i, f)) for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("use_graph", [True, False], ids=["graph", "eager"])
def test_two_models_in_two_threads_match_single_threaded_runs(use_graph):
    data = [_data(0), _data(1)]
    want = [_train(_model(k, use_graph), data[k]) for k in (0, 1)]
    for _ in range(ROUNDS):
        models = [_model(k, use_graph) for k in (0, 1)]  # traced in the threads
        got = _run_threads([lambda k=k: _train(models[k], data[k]) for k in (0, 1)])
        for k in (0, 1):
            assert_same(got[k], want[k], f"model {k}")


def test_tracing_state_is_per_thread():
    seen = {}

    def other():
        seen["building"] = is_building()

    with building(), no_grad():
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen["building"] is False


def test_first_use_from_two_threads_of_a_fresh_process():
    script = textwrap.dedent("""
        import threading, numpy as np
        from singa_graph import ops
        from singa_graph.ir import Graph, Placeholder
        from singa_graph.passes import compile
        import singa_graph as sg
        errors, barrier = [], threading.Barrier(4)
        def eager():
            barrier.wait()
            x = sg.Tensor(data=np.eye(3, dtype=np.float32))
            assert (ops.matmul(x, x).data == np.eye(3)).all()
        def graph():
            barrier.wait()
            x = Placeholder((3, 3))
            plan = compile(Graph([ops.matmul(x, x)], inputs=[x]))
            assert (plan.run([np.eye(3)])[0] == np.eye(3)).all()
        def wrap(f):
            try:
                f()
            except BaseException as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=wrap, args=(f,)) for f in (eager, graph, eager, graph)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print("ERRORS", errors)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert "ERRORS []" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("use_graph", [True, False], ids=["graph", "eager"])
def test_one_model_from_two_threads_gives_the_sequential_result(use_graph):
    x, y = _data(0)[0]
    steps = 150
    seq = _model(0, use_graph)
    for _ in range(2 * steps + 1):
        seq(x, y)
    m = _model(0, use_graph)
    m(x, y)  # compiled and cached: both threads run the same plan

    def work():
        for _ in range(steps):
            m(x, y)

    _run_threads([work, work])
    want = {k: t.data for k, t in seq.get_states().items()}
    assert_same({k: t.data for k, t in m.get_states().items()}, want)
    assert m.optimizer._step_count() == seq.optimizer._step_count() == 2 * steps + 1
