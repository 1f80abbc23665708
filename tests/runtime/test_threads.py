import numpy as np
from threadpoolctl import threadpool_info

from singa_graph import ops
from singa_graph.ir import Graph, Placeholder
from singa_graph.passes import compile


def _blas_threads():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def _plan(**kw):
    x = Placeholder((4, 4))
    return compile(Graph([ops.matmul(x, x)], inputs=[x]), **kw)


def test_plan_runs_blas_on_the_requested_threads_and_restores_them():
    before = _blas_threads()
    plan = _plan()
    seen = []
    plan.steps.append(lambda: seen.append(_blas_threads()))
    out = plan.run([np.eye(4, dtype=np.float32)])[0]
    np.testing.assert_array_equal(out, np.eye(4))
    assert seen and all(n == 1 for n in seen[0])
    assert _blas_threads() == before


def test_blas_threads_none_leaves_blas_alone():
    before = _blas_threads()
    plan = _plan(blas_threads=None)
    seen = []
    plan.steps.append(lambda: seen.append(_blas_threads()))
    plan.run([np.eye(4, dtype=np.float32)])
    assert seen[0] == before
