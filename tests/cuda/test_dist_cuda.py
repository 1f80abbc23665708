"""Data-parallel training of a model on CUDA devices: two ranks (each on the CUDA device,
the simulator here) with batch B match one CPU process with batch 2B; all-reduce buckets
of every size, eager mode and the sparse update keep the ranks equal."""
import os
import subprocess
import sys

import numpy as np
import pytest

import dist_worker as w
from singa_graph import opt, random as sg_random

HERE = os.path.dirname(os.path.abspath(__file__))
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.fixture(scope="module")
def results(tmp_path_factory, gpu):
    if not os.path.exists(MPIEXEC):
        pytest.skip("no mpiexec next to the interpreter (pip install mpich)")
    out = tmp_path_factory.mktemp("cuda_dist")
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run([MPIEXEC, "-n", "2", sys.executable,
                        os.path.join(HERE, "dist_worker.py"), str(out)],
                       capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    with np.load(out / "cuda_dist.npz") as z:
        return {k: z[k] for k in z.files}


def _one_process(graph):
    sg_random.seed(100)  # rank 0's seed
    m = w.make_model()
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    x, y = w.batches(2)
    m.compile([x[0]], is_train=True, use_graph=graph)
    losses = [float(m(x[s], y[s])[1].to_numpy()[0]) for s in range(w.STEPS)]
    return np.array(losses), {k: p.to_numpy() for k, p in m.get_params().items()}


@pytest.mark.parametrize("config", ["graph-small", "graph-large", "eager"])
def test_two_gpu_ranks_match_one_cpu_process_with_twice_the_batch(results, config):
    losses, params = _one_process(graph=config != "eager")
    np.testing.assert_allclose(results[f"{config}/loss"], losses, rtol=1e-5, atol=1e-6)
    for k, v in params.items():
        np.testing.assert_allclose(results[f"{config}/param/{k}"], v, rtol=1e-5, atol=1e-6,
                                   err_msg=k)


def test_sparse_update_on_gpus_keeps_ranks_equal(results):
    # the worker asserts that every parameter is equal on both ranks after each config
    assert np.isfinite(results["sparse/loss"]).all()
    assert any(k.startswith("sparse/param/") for k in results)
