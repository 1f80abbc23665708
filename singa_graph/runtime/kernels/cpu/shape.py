"""Data-movement kernels. Reshape/Flatten outputs alias their input inside a plan, so the
kernel only copies when the memory planner (or eager mode) gave them separate buffers."""
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ....ops._util import tiled
from ....runtime import threads
from ...registry import kernel
from .depthwise_channels_last import transpose_channels
from .loops import bound
from .simd import _Args


def _noop():
    pass


@kernel("Reshape")
@kernel("Flatten")
def reshape(op, ins, outs):
    (x,), (y,) = ins, outs
    if np.shares_memory(x, y):
        return _noop
    xf = x.reshape(y.shape)
    return lambda: np.copyto(y, xf)


@kernel("Identity")
def identity(op, ins, outs):
    (x,), (y,) = ins, outs
    if np.shares_memory(x, y):
        return _noop
    return lambda: np.copyto(y, x)


@kernel("Transpose")
def transpose(op, ins, outs):
    (x,), (y,) = ins, outs
    if (tuple(op.perm) in ((0, 2, 3, 1), (0, 3, 1, 2)) and tiled(x.dtype)
            and x.flags.c_contiguous and y.flags.c_contiguous and x.size):
        # NCHW <-> NHWC in cache-sized tiles: numpy's copy wrote one element per cache line
        # (125 us for 32 channels of 32x32, batch 2; 20 tiled)
        to_last = op.perm == (0, 2, 3, 1)
        n, c, hw = (x.shape[0], x.shape[1], x.shape[2] * x.shape[3]) if to_last else \
            (x.shape[0], x.shape[3], x.shape[1] * x.shape[2])
        parts = max(1, min(threads.num_threads(), n))
        return bound(transpose_channels, x.reshape(-1), y.reshape(-1), n, c, hw, to_last,
                     parts)
    xt = x.transpose(op.perm)
    return lambda: np.copyto(y, xt)


@kernel("Concat")
def concat(op, ins, outs):
    """The inputs' runs, copied in output order by every thread, each a contiguous share of
    the output's bytes (:func:`join`). ``np.concatenate`` copied on one thread; in a plan
    the inputs were mostly written by convolutions that split their batch over the threads,
    so the one copying thread read half of them from the other core's cache (squeezenet's
    fire modules and densenet121's 58 Concats: each output the first reader of its inputs).
    With batch 2 on two threads each thread now copies the sample that its core wrote."""
    (y,) = outs
    parts = max(1, min(threads.num_threads(), y.nbytes // JOIN_MIN_BYTES))
    if parts == 1 or not (y.flags.c_contiguous and all(a.flags.c_contiguous and
                                                       a.dtype == y.dtype for a in ins)):
        return lambda: np.concatenate(ins, axis=op.axis, out=y)
    outer = int(np.prod(y.shape[:op.axis], dtype=np.int64))
    # per input: its address and the bytes of one run (everything from the axis on)
    table = np.array([[a.ctypes.data, a.nbytes // outer if outer else 0] for a in ins],
                     dtype=np.int64)
    flat = y.reshape(-1).view(np.uint8)
    step = bound(join, flat, table, outer, parts)
    step.inputs = ins  # the table holds their addresses: they live as long as the step
    return step


#: bytes of output each thread copies at least (below that, np.concatenate on one thread)
JOIN_MIN_BYTES = 16 << 10


@intrinsic
def _copy_from(typingctx, y, yo, address, n):
    """``y[yo:yo + n] = the n bytes at address`` (``y`` a uint8 array)."""
    sig = types.void(y, yo, address, n)

    def codegen(context, builder, sig, args):
        a = _Args(context, builder, sig, args)
        (data,), (yo_, address_, count) = a.pointers(0), a.ints(1, 2, 3)
        src = builder.inttoptr(address_, ir.IntType(8).as_pointer())
        cgutils.raw_memcpy(builder, builder.gep(data, [yo_]), src, count, 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, parallel=True)
def join(y, table, outer, parts):
    """The concatenation into the bytes ``y`` of ``outer`` runs of each input in turn
    (``table[i] = (address, bytes of a run)``): part ``t`` copies output bytes ``[lo, hi)``,
    the parts' bounds on 64-byte lines, whatever run they fall in."""
    k = table.shape[0]
    total = y.size
    for t in prange(parts):
        lo = (t * total // parts) // 64 * 64 if t else 0
        hi = ((t + 1) * total // parts) // 64 * 64 if t < parts - 1 else total
        at = 0
        for r in range(outer):
            for i in range(k):
                m = table[i, 1]
                a, b = max(at, lo), min(at + m, hi)
                if a < b:
                    _copy_from(y, a, table[i, 0] + r * m + (a - at), b - a)
                at += m
                if at >= hi:
                    break
            if at >= hi:
                break


@kernel("Split")
def split(op, ins, outs):
    (x,) = ins
    bounds = np.cumsum((0,) + op.parts)
    idx = [(slice(None),) * op.axis + (slice(int(s), int(e)),)
           for s, e in zip(bounds[:-1], bounds[1:])]
    views = [x[i] for i in idx]
    pairs = list(zip(outs, views))

    def step():
        for o, v in pairs:
            np.copyto(o, v)
    return step
