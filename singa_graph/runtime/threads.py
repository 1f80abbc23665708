"""One thread policy for the whole process: who uses the cores, how many, and how they wait.

A training step alternates GEMMs (BLAS) with loops (Numba). Left alone, OpenBLAS and Numba
each keep a pool of one thread per core, and both pools busy-wait for a while after their
work ends, so on a small machine each steals the cores the other needs next (the ResNet
step of bench/step_time.py ran 2.7x slower that way). So, from the first kernel that runs in
the process on (compiled plan, eager Model or plain ``autograd`` code alike):

* BLAS runs on one thread per call (set once, process-wide, with threadpoolctl);
* every parallel kernel runs on Numba's thread pool (its 'omp' layer: GNU OpenMP, libgomp),
  the only pool of the process: GEMM-heavy kernels (convolutions, large matmuls) split their
  batch or their output into ``num_threads()`` parts in a ``prange`` loop, each part calling
  single-threaded BLAS from Numba on its own slice of planned workspace
  (runtime/kernels/cpu/blas.py), so every core does GEMM; loops (pooling, BatchNorm,
  optimizer updates) use ``prange`` on the same threads.

How many threads: all of Numba's pool (``NUMBA_NUM_THREADS``, one per core by default),
unless :func:`set_num_threads` or ``SINGA_GRAPH_NUM_THREADS`` says otherwise. Processes
that share a host, such as MPI ranks, each take their share of its cores
(:func:`share_host`, called by ``singa_graph.dist``), unless the user set a count.

How they wait. Between kernels libgomp's threads spin for a while (300,000 rounds,
milliseconds) before they sleep, and singa_graph leaves that as it is. A shorter spin
(``GOMP_SPINCOUNT=1000``, tried as the default here) let a busy machine have its cores back
sooner but made every kernel after a gap wake its threads; measured with
bench/contention.py on 2 cores, one taken by a busy loop (2026-11-26), squeezenet inference
slowed 2.9-3.2x with the short spin and 1.1-1.3x with libgomp's (onnxruntime 1.0x), the CNN
training step 1.4x and 2.1x (PyTorch 2.1x; the busy step took the same 7.4-7.8 ms either
way), and the quiet steps of bench/step_time.py did not change. ``OMP_WAIT_POLICY`` and
``GOMP_SPINCOUNT`` set by the user are libgomp's to read, as always
(``OMP_WAIT_POLICY=passive``: sleep at once, for machines oversubscribed for long).

``configure(blas_threads=None)`` before the first step leaves BLAS alone (for programs that
need multi-threaded BLAS elsewhere); ``SINGA_GRAPH_BLAS_THREADS`` sets the same from the
environment (a number, or ``none``).
"""
from __future__ import annotations

import os
import threading

#: environment variables that set a thread count; any of them set means "the user chose"
_COUNT_VARS = ("SINGA_GRAPH_NUM_THREADS", "NUMBA_NUM_THREADS")

_lock = threading.Lock()
_local = threading.local()  # per Python thread: the policy generation applied to Numba
_policy = {"blas_threads": 1, "applied": False, "limiter": None,
           "num_threads": None, "chosen": False, "generation": 0}


def _env_blas():
    v = os.environ.get("SINGA_GRAPH_BLAS_THREADS")
    if v is None:
        return 1
    return None if v.strip().lower() in ("", "none") else int(v)


def _env_threads():
    v = os.environ.get("SINGA_GRAPH_NUM_THREADS", "").strip()
    return int(v) if v else None


_policy["blas_threads"] = _env_blas()
_policy["num_threads"] = _env_threads()
_policy["chosen"] = any(v in os.environ for v in _COUNT_VARS)


def configure(blas_threads: int | None = 1) -> None:
    """Set the BLAS thread count that the policy applies (None: leave BLAS alone).

    Takes effect now if the policy was applied already, else at the first kernel run."""
    if blas_threads is not None and int(blas_threads) < 1:
        raise ValueError(f"blas_threads must be >= 1 or None, got {blas_threads!r}")
    with _lock:
        _policy["blas_threads"] = None if blas_threads is None else int(blas_threads)
        if _policy["limiter"] is not None:
            _policy["limiter"].restore_original_limits()
            _policy["limiter"] = None
        _policy["applied"] = False
    apply()


def set_num_threads(n: int | None) -> None:
    """Run every parallel kernel of this process on ``n`` threads (None: all of Numba's pool).

    For every Python thread that runs kernels, from its next plan run or eager op on; plans
    bound before split their work for the count they were bound with. ``n`` may not exceed
    Numba's pool (``NUMBA_NUM_THREADS``, fixed when Numba is imported). An explicit count is
    kept when processes later share the host (:func:`share_host`).
    ``SINGA_GRAPH_NUM_THREADS`` in the environment sets the same at import.
    """
    _set_threads(n, chosen=True)


def get_num_threads() -> int:
    """Threads every parallel kernel of this process runs on."""
    apply()
    return num_threads()


def share_host(local_processes: int) -> int:
    """Take this process's share of the host's cores when ``local_processes`` processes of
    one job (MPI ranks on one machine) run on it: ``cores // local_processes``, at least 1.

    A count the user chose (:func:`set_num_threads`, ``SINGA_GRAPH_NUM_THREADS`` or
    ``NUMBA_NUM_THREADS``) is kept. Returns the thread count in force.
    """
    if local_processes < 1:
        raise ValueError(f"local_processes must be >= 1, got {local_processes!r}")
    if not _policy["chosen"]:
        _set_threads(max(1, available_cores() // int(local_processes)), chosen=False)
    return get_num_threads()


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), bounded by Numba's pool."""
    import numba

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, int(numba.config.NUMBA_NUM_THREADS)))


def _set_threads(n, chosen: bool) -> None:
    import numba

    if n is not None:
        n = int(n)
        pool = int(numba.config.NUMBA_NUM_THREADS)
        if not 1 <= n <= pool:
            raise ValueError(f"thread count must be between 1 and Numba's pool of {pool} "
                             f"(NUMBA_NUM_THREADS), got {n}")
    with _lock:
        _policy["chosen"] = chosen or _policy["chosen"]
        if n != _policy["num_threads"]:
            _policy["num_threads"] = n
            _policy["generation"] += 1
    apply()


def apply() -> None:
    """Apply the policy: once per process for BLAS, once per Python thread (and after every
    change) for Numba's thread count, which Numba keeps per thread. Cheap when applied."""
    if not _policy["applied"]:
        _apply_blas()
    if getattr(_local, "generation", -1) != _policy["generation"]:
        import numba

        n = _policy["num_threads"]
        numba.set_num_threads(int(numba.config.NUMBA_NUM_THREADS) if n is None else n)
        _local.generation = _policy["generation"]


def _apply_blas() -> None:
    with _lock:
        if _policy["applied"]:
            return
        n = _policy["blas_threads"]
        if n is not None:
            try:
                from threadpoolctl import threadpool_limits
            except ImportError:  # pragma: no cover - threadpoolctl is a dependency
                pass
            else:
                _load_numba_blas()
                _policy["limiter"] = threadpool_limits(limits=n, user_api="blas")
        _policy["applied"] = True


def _load_numba_blas() -> None:
    """BLAS calls from Numba kernels (kernels/cpu/blas.py) go to numpy's own CBLAS, which the
    limit covers already; where numpy exports none they go to SciPy's OpenBLAS instead,
    which is loaded lazily when the first such kernel runs: load it now, so that the limit
    covers it too."""
    try:
        import scipy.linalg.cython_blas  # noqa: F401
    except ImportError:  # pragma: no cover - then Numba kernels use no BLAS of their own
        pass


def num_threads() -> int:
    """Parts of a batch-parallel kernel: Numba's thread count in the calling thread."""
    import numba

    return max(1, int(numba.get_num_threads()))
