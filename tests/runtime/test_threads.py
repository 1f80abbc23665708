"""The process-wide thread policy: BLAS on one thread while kernels run, batch-parallel
kernels on Numba's thread pool."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from singa_graph import ops
from singa_graph.ir import Graph, Placeholder
from singa_graph.passes import compile
from singa_graph.runtime import threads


def _blas_threads():
    """Threads of numpy's BLAS, the one the kernels call (a BLAS that another library
    loads later, such as scipy's, is not the kernels' concern)."""
    return [i["num_threads"] for i in threadpool_info()
            if i["user_api"] == "blas" and "numpy" in i["filepath"]]


def test_plan_steps_run_blas_on_one_thread():
    x = Placeholder((4, 4))
    plan = compile(Graph([ops.matmul(x, x)], inputs=[x]))
    seen = []
    plan.steps.append(lambda: seen.append(_blas_threads()))
    out = plan.run([np.eye(4, dtype=np.float32)])[0]
    np.testing.assert_array_equal(out, np.eye(4))
    assert seen and all(n == 1 for n in seen[0])


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, check=True, timeout=120).stdout


def test_eager_autograd_code_runs_under_the_policy_too():
    out = _fresh("""
        import numpy as np
        from threadpoolctl import threadpool_limits, threadpool_info
        threadpool_limits(2, "blas")
        from singa_graph import tensor, autograd
        x = tensor.from_numpy(np.ones((3, 3), np.float32))
        autograd.matmul(x, x)
        print(sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}))
    """)
    assert out.strip() == "[1]"


def test_blas_threads_none_leaves_blas_alone():
    out = _fresh("""
        import numpy as np
        from threadpoolctl import threadpool_limits, threadpool_info
        threadpool_limits(2, "blas")
        from singa_graph import tensor, autograd
        from singa_graph.runtime import threads
        threads.configure(blas_threads=None)
        x = tensor.from_numpy(np.ones((3, 3), np.float32))
        autograd.matmul(x, x)
        print(sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}))
    """)
    assert out.strip() == "[2]"


def _fresh_env(code: str, **env) -> str:
    """Run ``code`` in a fresh interpreter whose environment has no thread settings but
    ``env``'s."""
    import os

    clean = {k: v for k, v in os.environ.items()
             if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "NUMBA_NUM_THREADS",
                          "SINGA_GRAPH_NUM_THREADS", "OMP_NUM_THREADS")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, check=True, timeout=120, env=dict(clean, **env)).stdout


_RUN_A_KERNEL = """
        import numpy as np
        from singa_graph import tensor, autograd
        autograd.relu(tensor.from_numpy(np.ones((3, 4, 8, 8), np.float32)))
"""


def test_the_wait_policy_is_left_to_libgomp():
    # a short spin (GOMP_SPINCOUNT=1000) slowed squeezenet 3x on a busy machine
    # (bench/contention.py); singa_graph sets no wait policy and runs on libgomp ('omp')
    out = _fresh_env("""
        import os
        import singa_graph
        print(os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY"))
    """ + _RUN_A_KERNEL + """
        import numba
        numba.get_num_threads()
        print(os.environ.get("GOMP_SPINCOUNT"), numba.threading_layer())
    """)
    assert out.split() == ["None", "None", "None", "omp"]


@pytest.mark.parametrize("user", [{"OMP_WAIT_POLICY": "active"}, {"OMP_WAIT_POLICY": "passive"},
                                  {"GOMP_SPINCOUNT": "7"}])
def test_a_wait_policy_the_user_set_wins(user):
    out = _fresh_env("""
        import os
        import singa_graph
        print(os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT"))
    """ + _RUN_A_KERNEL, **user)
    assert out.split() == [user.get("OMP_WAIT_POLICY", "None"), user.get("GOMP_SPINCOUNT", "None")]


def test_set_num_threads_applies_to_every_python_thread_and_checks_its_argument():
    out = _fresh_env("""
        import threading
        import numba
        import numpy as np
        import singa_graph
        from singa_graph import ops
        from singa_graph.ir import Graph, Placeholder
        from singa_graph.passes import compile
        pool = numba.config.NUMBA_NUM_THREADS
        try:
            singa_graph.set_num_threads(pool + 1)
        except ValueError:
            print("refused", singa_graph.get_num_threads() == pool)
        singa_graph.set_num_threads(1)
        x = Placeholder((4, 4))
        plan = compile(Graph([ops.relu(x)], inputs=[x]))
        seen = []
        plan.steps.append(lambda: seen.append(numba.get_num_threads()))
        t = threading.Thread(target=lambda: plan.run([np.ones((4, 4), np.float32)]))
        t.start(); t.join()
        print(singa_graph.get_num_threads(), seen)
    """)
    assert out.splitlines() == ["refused True", "1 [1]"]


@pytest.mark.parametrize("env,expect", [({}, "share"), ({"SINGA_GRAPH_NUM_THREADS": "1"}, "1"),
                                        ({"NUMBA_NUM_THREADS": "1"}, "1")])
def test_processes_sharing_a_host_take_their_share_unless_the_user_chose(env, expect):
    out = _fresh_env("""
        from singa_graph.runtime import threads
        print(threads.available_cores() // 2 or 1, threads.share_host(2))
    """, **env)
    share, got = out.split()
    assert got == (share if expect == "share" else expect)


def test_large_matmuls_split_into_blocks_and_match(monkeypatch):
    from singa_graph.runtime.kernels.cpu import linalg

    rng = np.random.default_rng(0)
    monkeypatch.setattr(linalg, "SPLIT_FLOPS", 0)
    monkeypatch.setattr(threads, "num_threads", lambda: 3)
    for (m, k, n) in [(7, 5, 4), (4, 5, 9)]:  # split by rows, then by columns
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        y = np.empty((m, n))
        linalg.split_matmul(a, b, y)()
        np.testing.assert_allclose(y, a @ b, rtol=1e-12)
        yt = np.empty((n, m))
        linalg.split_matmul(b.T, a.T, yt)()  # transposed views
        np.testing.assert_allclose(yt, (a @ b).T, rtol=1e-12)
