"""Data-parallel training: ranks launched with the mpich wheel's mpiexec on this machine.

Every launch has a wall-clock limit, so a hang fails the test instead of stalling the suite.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("mpi4py")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import worker  # noqa: E402

from singa_graph import opt, random as sg_random  # noqa: E402

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
if not os.path.exists(MPIEXEC):
    pytest.skip("no mpiexec next to the interpreter (pip install mpich)",
                allow_module_level=True)


def launch(*args, n=2, limit=240, flags=()):
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    cmd = [MPIEXEC, *flags, "-n", str(n), sys.executable, os.path.join(HERE, "worker.py"),
           *map(str, args)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env)
    return p, time.monotonic() - t0


@pytest.fixture(scope="module")
def equiv_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("equiv")
    p, _ = launch("equiv", out)
    assert p.returncode == 0, p.stdout + p.stderr
    with np.load(out / "equiv.npz") as z:
        return {k: z[k] for k in z.files}


def reference(graph: bool):
    """One process, batch 2B, rank 0's seed."""
    sg_random.seed(100)
    m = worker.make_model()
    m.set_optimizer(opt.SGD(lr=worker.LR, momentum=worker.MOMENTUM))
    x, y = worker.batches(2)
    m.compile([x[0]], is_train=True, use_graph=graph)
    losses = [m(x[s], y[s])[1].data.item() for s in range(worker.STEPS)]
    return np.array(losses), {k: p.data.copy() for k, p in m.get_params().items()}


@pytest.mark.parametrize("config", list(worker.CONFIGS))
def test_two_ranks_match_one_process_with_twice_the_batch(equiv_results, config):
    graph = worker.CONFIGS[config][0]
    losses, params = reference(graph)
    got = equiv_results[f"{config}/loss"]
    np.testing.assert_allclose(got, losses, rtol=1e-5)
    for k, v in params.items():
        np.testing.assert_allclose(equiv_results[f"{config}/param/{k}"], v, rtol=1e-5,
                                   atol=1e-5 * np.abs(v).max(), err_msg=k)
    n_params = len(params)
    buckets = int(equiv_results[f"{config}/buckets"])
    if config == "graph-small":  # threshold below every gradient: one all-reduce each
        assert buckets == n_params
    elif config == "graph-large":  # all gradients in one bucket
        assert buckets == 1
    elif graph:
        assert 1 < buckets < n_params


# ---------------------------------------------------------------------------- semantics
@pytest.fixture(scope="module")
def semantics_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("semantics")
    p, _ = launch("semantics", out)
    assert p.returncode == 0, p.stdout + p.stderr
    with np.load(out / "semantics.npz") as z:
        return {k: z[k] for k in z.files}


def sparse_reference(topk, corr, world=2, steps=3):
    """numpy: per rank x = g (+ residual); keep |x| >= spars or the ceil(spars n) largest
    |x|; the sum over ranks times 0.5; residual = x with the kept elements zeroed."""
    shapes = [(3, 4), (5,), (2, 2, 2)]
    n = sum(math.prod(s) for s in shapes)
    spars = 0.3 if topk else 0.8
    res = [np.zeros(n, np.float32) for _ in range(world)]
    out = []
    for step in range(steps):
        total = np.zeros(n, np.float64)
        for r in range(world):
            rng = np.random.default_rng([r, step])
            x = np.concatenate([rng.standard_normal(s).astype(np.float32).ravel()
                                for s in shapes])
            if corr:
                x = x + res[r]
            if topk:
                keep = np.argsort(-np.abs(x), kind="stable")[:math.ceil(spars * n)]
                mask = np.zeros(n, bool)
                mask[keep] = True
            else:
                mask = np.abs(x) >= spars
            total += np.where(mask, x, 0)
            res[r] = np.where(mask, 0, x).astype(np.float32)
        out.append((total * 0.5, [r.copy() for r in res]))
    return out


@pytest.mark.parametrize("topk", [False, True])
@pytest.mark.parametrize("corr", [False, True])
def test_sparse_allreduce_matches_numpy(semantics_results, topk, corr):
    key = f"sparse-topk{int(topk)}-corr{int(corr)}"
    for step, (total, res) in enumerate(sparse_reference(topk, corr)):
        np.testing.assert_allclose(semantics_results[f"{key}/{step}/sum"], total, rtol=1e-6,
                                   atol=1e-6)
        if corr:
            for r in range(2):
                np.testing.assert_allclose(semantics_results[f"{key}/{step}/res{r}"], res[r],
                                           rtol=1e-6, atol=1e-7)


def test_partial_average_matches_numpy(semantics_results):
    """Step s averages partition s % 2 of [[0], [1, 2]] over the ranks; the rest stays."""
    shapes = [(4,), (2, 3), (5,)]
    cur = [[np.random.default_rng([r, 9, i]).standard_normal(s).astype(np.float32)
            for i, s in enumerate(shapes)] for r in range(2)]
    for step in range(3):
        part = [[0], [1, 2]][step % 2]
        for i in part:
            mean = (cur[0][i] + cur[1][i]) * np.float32(0.5)
            cur[0][i], cur[1][i] = mean, mean.copy()
        for i in range(3):
            for r in range(2):
                np.testing.assert_allclose(semantics_results[f"partial/{step}/{i}/all"][r],
                                           cur[r][i], rtol=1e-6, err_msg=f"step {step} p{i}")


def test_eager_all_reduce_and_fused_all_reduce_sum_in_place(semantics_results):
    # ranks hold 1 and 2: a is summed twice (3, then 6), b once (3)
    for r in range(2):
        np.testing.assert_array_equal(semantics_results[f"eager-collectives/rank{r}"],
                                      [6, 6, 6, 3, 3, 3, 3])


# ---------------------------------------------------------------------------- failure
def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in "ZX"


@pytest.mark.parametrize("how", ["kill", "hang"])
def test_a_dead_or_hung_rank_stops_the_others_within_the_timeout(tmp_path, how):
    """Rank 1 is SIGKILLed or SIGSTOPped (alive but silent: only the deadline can tell) at
    step 3.

    Hydra's mpiexec kills the whole job at once when a rank dies of a signal, so here each
    rank runs under a shell (which exits normally, with status 137) and the launcher is told
    not to clean up: rank 0 has to notice by itself, as under launchers that do not clean
    up. Each rank's stderr goes to its own file, and rank 0's process is watched until it
    has exited, because mpiexec may return before it."""
    timeout = 6.0
    flags = ["-disable-auto-cleanup"]
    wrap = ["sh", "-c", f'"$0" "$@" 2>"{tmp_path}/err.$PMI_RANK"']
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run([MPIEXEC, *flags, "-n", "2", *wrap, sys.executable,
                        os.path.join(HERE, "worker.py"), how, str(tmp_path), str(timeout)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode != 0, p.stdout + p.stderr
    died = float((tmp_path / "died").read_text())
    pid = int((tmp_path / "pid.0").read_text())
    while not _gone(pid) and time.time() - died < timeout + 30:
        time.sleep(0.1)
    assert _gone(pid), "rank 0 is still running"
    assert time.time() - died < timeout + 10, f"rank 0 took {time.time() - died:.1f} s"
    err = (tmp_path / "err.0").read_text()
    assert "finished without noticing" not in p.stdout
    assert "DistError: rank 0/2:" in err, err
    if how == "kill":
        assert "peer rank(s) [1] on this host died" in err, err
    else:
        assert f"did not complete within the {timeout:g} s timeout" in err, err
    # rank 0 stopped the whole job with a non-zero code
    assert "MPI_Abort(MPI_COMM_WORLD, 1) - process 0" in err, err


def test_example_trains_over_two_ranks():
    root = os.path.dirname(os.path.dirname(HERE))
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run([MPIEXEC, "-n", "2", sys.executable,
                        os.path.join(root, "examples", "cnn.py"), "--dist", "--epochs", "1",
                        "--limit", "128", "--batch-size", "16", "--quiet"],
                       capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 ranks x batch 16" in p.stdout
    assert p.stdout.count("final test accuracy") == 1  # rank 0 reports


@pytest.mark.parametrize("graph", [0, 1])
def test_partial_update_through_a_model_averages_one_partition_per_step(semantics_results,
                                                                        graph):
    """Fusion threshold 200 splits the 8 parameters into 3 partitions; step s leaves exactly
    partition s on every rank equal (ranks start from the same broadcast weights but train
    on different data), and the three partitions cover every parameter once."""
    key = f"e2e/{graph}/backward_and_partial_update/"
    sizes = semantics_results[key + "/sizes"]
    parts = [np.flatnonzero(semantics_results[f"{key}/{s}"]) for s in range(3)]
    assert all(len(p) for p in parts)
    assert sorted(np.concatenate(parts)) == list(range(len(sizes)))
    assert all(sizes[p].sum() > 200 for p in parts[:-1])


@pytest.mark.parametrize("graph", [0, 1])
@pytest.mark.parametrize("topk", [False, True])
def test_sparse_update_through_a_model_keeps_ranks_equal(semantics_results, graph, topk):
    for s in range(3):
        assert semantics_results[f"e2e/{graph}/backward_and_sparse_update/{topk}/{s}"].all()


def test_a_killed_rank_under_plain_mpiexec_stops_the_job(tmp_path):
    """The default launch: Hydra's mpiexec tears the job down itself (or rank 0 notices the
    dead peer first); either way nothing keeps running and the exit status is non-zero."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run([MPIEXEC, "-n", "2", sys.executable, os.path.join(HERE, "worker.py"),
                        "kill", str(tmp_path), "60"],
                       capture_output=True, text=True, timeout=120, env=env)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "BAD TERMINATION" in out or "DistError" in out, out
    died = float((tmp_path / "died").read_text())
    pid = int((tmp_path / "pid.0").read_text())
    while not _gone(pid) and time.time() - died < 30:
        time.sleep(0.1)
    assert _gone(pid) and time.time() - died < 10


_REPORT_THREADS = """
import numba
from singa_graph.dist import Communicator
from singa_graph.runtime import threads
from mpi4py import MPI
c = Communicator()
row = (c.global_rank, c.local_size, threads.available_cores(), c.num_threads,
       numba.get_num_threads())
rows = MPI.COMM_WORLD.gather(row)  # one writer: two ranks' lines can interleave mid-line
if c.global_rank == 0:
    print("\\n".join(" ".join(map(str, r)) for r in rows), flush=True)
"""


@pytest.mark.parametrize("user", [None, "2"])
def test_ranks_on_one_host_share_its_cores_unless_the_user_chose(user):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "SINGA_GRAPH_NUM_THREADS")}
    if user:
        env["SINGA_GRAPH_NUM_THREADS"] = user
    p = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", _REPORT_THREADS],
                       capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = sorted(tuple(map(int, line.split())) for line in p.stdout.splitlines())
    assert [r[0] for r in rows] == [0, 1]
    for _, local, cores, mine, numba_threads in rows:
        want = int(user) if user else max(1, cores // 2)
        assert (local, mine, numba_threads) == (2, want, want)
