"""Serial and parallel twins of Numba loops, and the rule that picks one."""
import types

from numba import njit

# Below this many inner-loop steps a loop runs on the calling thread: waking the thread pool
# costs more than the loop (milliseconds when the machine is busy).
PARALLEL_WORK = 1 << 16


def loops(fn=None, **options):
    """``(serial, parallel)`` Numba versions of a loop written with ``prange``, compiled
    with Numba's ``options`` (``@loops`` or ``loops(fn, fastmath=...)``).

    The serial one is compiled from a renamed copy, so the two never share a cache entry;
    each is compiled only when first called.
    """
    if fn is None:
        return lambda f: loops(f, **options)
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial",
                              fn.__defaults__, fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + "_serial"
    return (njit(cache=True, **options)(twin),
            njit(cache=True, parallel=True, **options)(fn))


def pick(pair, work: int):
    """The version of ``pair`` (from :func:`loops`) worth running for ``work`` steps."""
    return pair[work >= PARALLEL_WORK]
