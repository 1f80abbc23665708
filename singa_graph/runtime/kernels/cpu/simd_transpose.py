"""Block transposes in vector registers, for the channel transposes of the
channels-innermost depthwise kernels (depthwise_channels_last.py): 8 x 8 blocks
(:func:`transpose8`) and, for 2x2 planes, 16 channels of 4 pixels (:func:`planes4_to_rows`,
:func:`rows_to_planes4`).

Written element by element, a transpose loads and stores every value on its own (Numba's
LLVM finds no vector form for the strided side), and an unrolled 8 x 8 block is no better:
LLVM's SLP vectoriser leaves it scalar. :func:`transpose8` loads eight rows as vectors,
transposes them with three rounds of shuffles (LLVM's ``shufflevector``, which AVX-512 and
AVX2 run as unpacks and permutes) and stores eight vectors; the 2x2 forms add one round
that interleaves (or separates) even and odd planes.
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


def _transposed(builder, rows):
    """The eight ``<8 x T>`` vectors ``rows`` transposed: result ``k`` holds lane ``k`` of
    every row, in row order."""
    for pairs, (lo, hi) in zip(_ROUNDS, _LANES):
        out = list(rows)
        for a, b in pairs:
            out[a] = _shuffle(builder, rows[a], rows[b], lo)
            out[b] = _shuffle(builder, rows[a], rows[b], hi)
        rows = out
    return rows


def _shuffle(builder, a, b, lanes):
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), 8), lanes))


class _Gen:
    """What the intrinsics' code generation shares: the vector type of the arrays' dtype,
    int64 arguments, array data pointers, vector loads and stores at element offsets, and
    the ReLU as a select."""

    def __init__(self, context, builder, sig, args):
        self.context, self.builder, self.sig, self.args = context, builder, sig, args
        self.vt = ir.VectorType(context.get_value_type(sig.args[0].dtype), 8)
        self.align = sig.args[0].dtype.bitwidth // 8

    def int(self, i):
        return self.context.cast(self.builder, self.args[i], self.sig.args[i], types.int64)

    def data(self, i):
        return make_array(self.sig.args[i])(self.context, self.builder, self.args[i]).data

    def at(self, base, off, stride=None, i=0):
        b = self.builder
        if stride is not None:
            off = b.add(off, b.mul(stride, ir.Constant(_I64, i)))
        elif i:
            off = b.add(off, ir.Constant(_I64, i))
        return b.bitcast(b.gep(base, [off]), self.vt.as_pointer())

    def load(self, ptr):
        return self.builder.load(ptr, align=self.align)

    def store(self, v, ptr, relu):
        b = self.builder
        zero = ir.Constant(self.vt, [0.0] * 8)
        clipped = b.select(b.fcmp_ordered("<", v, zero), zero, v)
        b.store(b.select(relu, clipped, v), ptr, align=self.align)

    def relu(self, i):
        return self.context.cast(self.builder, self.args[i], self.sig.args[i], types.boolean)


@intrinsic
def transpose8(typingctx, src, so, ss, dst, do, ds, relu):
    """``dst[do + k*ds + i] = src[so + i*ss + k]`` for ``i, k < 8`` (offsets and row
    strides in elements from each array's first element; both arrays contiguous, of one
    float dtype), with ``max(v, 0)`` on the way when ``relu`` (NaN and -0.0 kept, as the
    scalar loops keep them)."""
    sig = types.void(src, so, ss, dst, do, ds, relu)

    def codegen(context, builder, sig, args):
        g = _Gen(context, builder, sig, args)
        so_, ss_, do_, ds_ = g.int(1), g.int(2), g.int(4), g.int(5)
        sp, dp, on = g.data(0), g.data(3), g.relu(6)
        rows = _transposed(builder, [g.load(g.at(sp, so_, ss_, i)) for i in range(8)])
        for k in range(8):
            g.store(rows[k], g.at(dp, do_, ds_, k), on)
        return context.get_dummy_value()

    return sig, codegen


#: interleaving two vectors' lanes, and its inverse (even lanes of the pair, odd lanes)
_ZIP = ([0, 8, 1, 9, 2, 10, 3, 11], [4, 12, 5, 13, 6, 14, 7, 15])
_UNZIP = ([0, 2, 4, 6, 8, 10, 12, 14], [1, 3, 5, 7, 9, 11, 13, 15])


@intrinsic
def planes4_to_rows(typingctx, src, so, dst, do, ds):
    """Sixteen planes of 4 pixels (2x2), contiguous at ``src[so:so + 64]``, as 4 rows of
    16 channels: ``dst[do + q*ds + c] = src[so + 4*c + q]``. Loaded as 8 vectors of two
    planes each, transposed (lane ``4*j + q``: the planes ``2*i + j`` at pixel ``q``), and
    each pixel's even and odd planes interleaved."""
    sig = types.void(src, so, dst, do, ds)

    def codegen(context, builder, sig, args):
        g = _Gen(context, builder, sig, args)
        so_, do_, ds_ = g.int(1), g.int(3), g.int(4)
        sp, dp = g.data(0), g.data(2)
        off = ir.Constant(ir.IntType(1), 0)  # no ReLU
        t = _transposed(builder, [g.load(g.at(sp, so_, None, 8 * i)) for i in range(8)])
        for q in range(4):
            row = builder.add(do_, builder.mul(ds_, ir.Constant(_I64, q)))
            g.store(_shuffle(builder, t[q], t[4 + q], _ZIP[0]), g.at(dp, row), off)
            g.store(_shuffle(builder, t[q], t[4 + q], _ZIP[1]), g.at(dp, row, None, 8), off)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def rows_to_planes4(typingctx, src, so, ss, dst, do, relu):
    """The inverse of :func:`planes4_to_rows`: ``dst[do + 4*c + q] = src[so + q*ss + c]``
    for ``c < 16``, ``q < 4``, with the ReLU of :func:`transpose8` when ``relu``."""
    sig = types.void(src, so, ss, dst, do, relu)

    def codegen(context, builder, sig, args):
        g = _Gen(context, builder, sig, args)
        so_, ss_, do_ = g.int(1), g.int(2), g.int(4)
        sp, dp, on = g.data(0), g.data(3), g.relu(5)
        lo = [g.load(g.at(sp, so_, ss_, q)) for q in range(4)]
        hi = [g.load(g.at(sp, builder.add(so_, ir.Constant(_I64, 8)), ss_, q))
              for q in range(4)]
        rows = ([_shuffle(builder, lo[q], hi[q], _UNZIP[0]) for q in range(4)]
                + [_shuffle(builder, lo[q], hi[q], _UNZIP[1]) for q in range(4)])
        for i, v in enumerate(_transposed(builder, rows)):
            g.store(v, g.at(dp, do_, None, 8 * i), on)
        return context.get_dummy_value()

    return sig, codegen
