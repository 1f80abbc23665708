"""Keep BLAS and Numba from fighting over the cores while a plan runs.

A plan alternates Numba parallel loops (im2col, pooling, batch norm) with BLAS calls. Both
thread pools busy-wait for a while after their work ends, so with BLAS threads enabled each
pool steals the cores the other needs next: on a 2-core machine the ResNet training step ran
2.7x slower than with single-threaded BLAS (286 ms vs 105 ms, bench/step_time.py). A plan
therefore runs BLAS on ``blas_threads`` threads (1 by default) and takes its parallelism
from the Numba kernels.

The BLAS thread count is process-wide, so plans running in several threads at once share one
limit: the first to enter sets it, the last to leave restores the original. (Nested
threadpoolctl limits from two threads would otherwise restore each other's values in the
wrong order and leave BLAS limited for good.)
"""
from __future__ import annotations

import contextlib
import threading

_controller = None
_lock = threading.Lock()
_active = {"count": 0, "limiter": None}


def _get_controller():
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    return _controller


@contextlib.contextmanager
def _shared_limit(n: int):
    with _lock:
        if _active["count"] == 0:
            _active["limiter"] = _get_controller().limit(limits=n, user_api="blas")
        _active["count"] += 1
    try:
        yield
    finally:
        with _lock:
            _active["count"] -= 1
            if _active["count"] == 0:
                _active["limiter"].restore_original_limits()
                _active["limiter"] = None


def blas_threads(n: int | None):
    """A context that limits BLAS to ``n`` threads (no-op for None or without threadpoolctl)."""
    if n is None:
        return contextlib.nullcontext()
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        return contextlib.nullcontext()
    return _shared_limit(n)
