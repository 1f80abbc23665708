"""Serial and parallel twins of Numba loops, the rule that picks one, and steps bound to
fixed arguments."""
import types

import numpy as np
from numba import njit, typeof
from numba.core.dispatcher import Dispatcher
from numba.core.typing.typeof import Purpose

# Below this many inner-loop steps a loop runs on the calling thread: waking the thread pool
# costs more than the loop (milliseconds when the machine is busy).
PARALLEL_WORK = 1 << 16

#: parts per thread for kernels that split a batch of equal units (samples, blocks of output
#: channels) into parts that each hold their own scratch. One part per thread left the
#: whole step waiting for the slower thread: on the 2-vCPU AMD EPYC (2026-11-29) two
#: processes running half the batch each took 394 us side by side, as long as one alone,
#: while the two halves as the parts of one parallel loop took 506-678 us; in four or more
#: parts a thread 399-465 (the bench ResNet's 32 -> 64 stride-2 conv, batch 32, on the
#: register tiles; its 16 -> 32 on the output-row tiles 625 -> 444 us).
PARTS_PER_THREAD = 4


def batch_parts(units: int, threads: int) -> int:
    """Parts to split ``units`` equal pieces of work into on ``threads`` threads."""
    return max(1, min(units, PARTS_PER_THREAD * threads))


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


def flat_view(a):
    """``a`` as a 1-d *view*: a kernel that writes into a copy would leave the step's
    output, or a parameter updated in place, silently unchanged."""
    v = a.reshape(-1)
    if v.size and not np.may_share_memory(v, a):
        raise ValueError(f"kernel needs a contiguous array, got strides {a.strides} for "
                         f"shape {a.shape}")
    return v


def bound(fn, *args):
    """The step ``fn(*args)`` for arguments bound once at plan build.

    A Numba dispatcher types every argument on every call to find its compiled version
    (about 1 us a step with the 15-20 arguments of a conv kernel: 65 us of mnasnet0_5's
    0.8 ms inference at batch 2). These arguments never change, so from the second call on
    the step calls that version's entry point directly; a step run once (eager mode) never
    pays for the lookup. Where no compiled version matches the arguments' exact types, the
    dispatcher keeps doing the work.

    The step's ``direct`` attribute is ``(callable, args)``, the call it makes, once that
    is settled (None before): a plan's hot loop calls it without the step's own frame."""
    if not isinstance(fn, Dispatcher):
        def plain():
            return fn(*args)
        plain.direct = (fn, args)
        return plain
    entry = None
    calls = 0

    def step():
        nonlocal entry, calls
        if entry is not None:
            return entry(*args)
        calls += 1
        out = fn(*args)
        if calls == 2:
            entry = _entry_point(fn, args) or fn
            step.direct = (entry, args)
        return out
    step.direct = None
    return step


def _entry_point(fn, args):
    """The compiled entry point of ``fn`` for the exact types of ``args``, or None."""
    try:
        sig = tuple(typeof(a, Purpose.argument) for a in args)
    except (ValueError, TypeError):
        return None
    cres = fn.overloads.get(sig)
    return None if cres is None else cres.entry_point
