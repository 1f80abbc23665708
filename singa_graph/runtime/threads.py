"""Keep BLAS and Numba from fighting over the cores while a plan runs.

A plan alternates Numba parallel loops (im2col, pooling, batch norm) with BLAS calls. Both
thread pools busy-wait for a while after their work ends, so with BLAS threads enabled each
pool steals the cores the other needs next: on a 2-core machine the ResNet training step ran
2.7x slower than with single-threaded BLAS (286 ms vs 105 ms, bench/step_time.py). A plan
therefore runs BLAS on ``blas_threads`` threads (1 by default) and takes its parallelism
from the Numba kernels.
"""
from __future__ import annotations

import contextlib

_controller = None


def blas_threads(n: int | None):
    """A context that limits BLAS to ``n`` threads (no-op for None or without threadpoolctl)."""
    global _controller
    if n is None:
        return contextlib.nullcontext()
    if _controller is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - threadpoolctl is a dependency
            return contextlib.nullcontext()
        _controller = ThreadpoolController()
    return _controller.limit(limits=n, user_api="blas")
