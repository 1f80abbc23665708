"""An 8 x 8 block transpose in vector registers, for the channel transposes of the
channels-innermost depthwise kernels (depthwise_channels_last.py).

Written element by element, a transpose loads and stores every value on its own (Numba's
LLVM finds no vector form for the strided side), and an unrolled 8 x 8 block is no better:
LLVM's SLP vectoriser leaves it scalar. :func:`transpose8` loads eight rows as vectors,
transposes them with three rounds of shuffles (LLVM's ``shufflevector``, which AVX-512 and
AVX2 run as unpacks and permutes) and stores eight vectors.
"""
from llvmlite import ir
from numba import types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

_I64 = ir.IntType(64)
#: the three rounds of an 8 x 8 transpose: (rows paired, lanes of the first result, of
#: the second), indices into the two rows' 16 lanes
_ROUNDS = (((0, 1), (2, 3), (4, 5), (6, 7)), ((0, 2), (1, 3), (4, 6), (5, 7)),
           ((0, 4), (1, 5), (2, 6), (3, 7)))
_LANES = (([0, 8, 2, 10, 4, 12, 6, 14], [1, 9, 3, 11, 5, 13, 7, 15]),
          ([0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]),
          ([0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]))


@intrinsic
def transpose8(typingctx, src, so, ss, dst, do, ds, relu):
    """``dst[do + k*ds + i] = src[so + i*ss + k]`` for ``i, k < 8`` (offsets and row
    strides in elements from each array's first element; both arrays contiguous, of one
    float dtype), with ``max(v, 0)`` on the way when ``relu`` (NaN and -0.0 kept, as the
    scalar loops keep them)."""
    sig = types.void(src, so, ss, dst, do, ds, relu)

    def codegen(context, builder, sig, args):
        et = context.get_value_type(sig.args[0].dtype)
        vt = ir.VectorType(et, 8)
        align = sig.args[0].dtype.bitwidth // 8
        so_, ss_, do_, ds_ = (context.cast(builder, args[i], sig.args[i], types.int64)
                              for i in (1, 2, 4, 5))
        sp = make_array(sig.args[0])(context, builder, args[0]).data
        dp = make_array(sig.args[3])(context, builder, args[3]).data

        def row(base, off, stride, i):
            at = builder.add(off, builder.mul(stride, ir.Constant(_I64, i)))
            return builder.bitcast(builder.gep(base, [at]), vt.as_pointer())

        rows = [builder.load(row(sp, so_, ss_, i), align=align) for i in range(8)]
        for pairs, (lo, hi) in zip(_ROUNDS, _LANES):
            out = list(rows)
            for a, b in pairs:
                out[a] = builder.shuffle_vector(rows[a], rows[b], ir.Constant(
                    ir.VectorType(ir.IntType(32), 8), lo))
                out[b] = builder.shuffle_vector(rows[a], rows[b], ir.Constant(
                    ir.VectorType(ir.IntType(32), 8), hi))
            rows = out
        zero = ir.Constant(vt, [0.0] * 8)
        on = context.cast(builder, args[6], sig.args[6], types.boolean)
        for k in range(8):
            v = rows[k]
            clipped = builder.select(builder.fcmp_ordered("<", v, zero), zero, v)
            builder.store(builder.select(on, clipped, v), row(dp, do_, ds_, k), align=align)
        return context.get_dummy_value()

    return sig, codegen
