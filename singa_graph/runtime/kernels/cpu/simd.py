"""Loops written in LLVM IR, for the kernels whose running values must stay in vector
registers: register-blocked multiply-add tiles (:func:`tile`, for conv_direct.py and
matmul_direct.py; :func:`depthwise_tile`, for conv_channels_last.py); strided window maxima
are simd_window.py's.

LLVM vectorises Numba's loops along one dimension, but it keeps a loop's running sums in
memory whenever it cannot prove that the arrays do not alias, and Numba arrays carry no
``noalias``: a convolution that accumulates a block of outputs over its inputs and taps
then loads and stores every sum at every step. :func:`tile` emits the loop itself through a
Numba ``@intrinsic``, with the sums as vector values that LLVM keeps in registers
(``R x V`` of them), the way the micro-kernels of BLAS libraries and onnxruntime's MLAS
hold them.

``tile(R, V)`` computes, for ``R`` rows of scalars (a row is, for a convolution, one
output pixel's inputs) and ``V`` vectors of ``LANES`` columns (output channels)::

    y[yo + r*ys + v*LANES + l] = sum over (i, j, c) of
        x[xo + offs[p0 + r] + i*ri + j*rj + c*rc] * w[wo + ((i*kw + j)*nc + c)*wr + v*wv + l]

for ``i < kh``, ``j < kw``, ``c < nc``, lanes ``l < LANES`` of every vector but the last,
and ``l < tail`` of the last (masked loads and stores: the others are neither read nor
written). Every sum is taken in the order ``(i, j, c)`` with one fused multiply-add per
term: the result depends on neither the tile shape nor the thread that computes it.
``offs`` holds each row's offset into ``x``, so a tile's rows need not be evenly spaced
(pixels that wrap to the next image row, or to the next sample). With ``more`` set the
sums start from ``y``'s values instead of zero: a sum taken in pieces, each a run of the
``(i, j, c)`` order, stored and reloaded between them, is the same chain of multiply-adds
and so the same bits (conv_direct.py cuts the weights into such runs that fit the L1
cache). The loops over ``i``,
``j``, ``c`` are ordinary LLVM loops; only the tile's own dimensions are unrolled.
"""
import numpy as np
from llvmlite import ir, ir_layer_typed_pointers_enabled
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from .... import host

#: bytes of one vector register of the target (singa_graph.host); LLVM splits vectors
#: wider than the machine's itself, so every width is correct everywhere
VECTOR_BYTES = host.vector_bytes()
#: vector registers of the target: how many running sums a tile may hold
REGISTERS = host.vector_registers()

_I1, _I32, _I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
_I8P = ir.IntType(8).as_pointer()
#: rows of weights ahead of the one a tile multiplies that it asks the cache to fetch. A
#: product's tile reads two vectors of a weight row, then the next row, a whole row of
#: columns further on (12 KiB for ConvNeXt's 768 x 3072): every read starts a new page,
#: where the hardware prefetchers stop. On the 2-core Intel Xeon (Emerald Rapids) those
#: tiles waited on L3: 8 x 768 x 3072 593 -> 417 us, 8 x 3072 x 768 670 -> 265 with the
#: weight in L3, convnext_tiny 23.3 -> 18.0 ms. Over the contiguous blocked weights of the
#: conv tiles the hint falls on lines already fetched and costs a load slot
PREFETCH_ROWS = 32


def lanes(dtype) -> int:
    """Values of ``dtype`` (a numpy dtype or scalar type, or a Numba float type) in one
    vector."""
    # str() alone names a numpy scalar type "<class 'numpy.float32'>": a caller passing
    # np.float32 got the float64 count, and a tile that wrote past its rows
    size = {"float32": 4, "float64": 8}.get(str(dtype)) or np.dtype(dtype).itemsize
    return VECTOR_BYTES // size


def _masked(builder, vt, width):
    """``(load(ptr, mask[, keep]), store(value, ptr, mask))`` of LLVM's masked memory
    intrinsics; a load's lanes off the mask are ``keep``'s (undefined without it)."""
    suffix = f"v{vt.count}f{width}"
    pt = vt.as_pointer()
    ptr = f"p0{suffix}" if ir_layer_typed_pointers_enabled else "p0"
    mt = ir.VectorType(_I1, vt.count)
    load = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vt, [pt, _I32, mt, vt]),
        f"llvm.masked.load.{suffix}.{ptr}")
    store = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [vt, pt, _I32, mt]),
        f"llvm.masked.store.{suffix}.{ptr}")
    align = ir.Constant(_I32, 4 if width == 32 else 8)
    return (lambda p, m, keep=ir.Constant(vt, None): builder.call(load, [p, align, m, keep]),
            lambda v, p, m: builder.call(store, [v, p, align, m]))


class _Args:
    """What an intrinsic's code generation starts from: the vector type of its arrays'
    ``dtype`` (``lanes`` of it), LLVM's masked loads and stores of it, and its arguments as
    int64 values (:meth:`ints`) or array data pointers (:meth:`pointers`). Without
    ``dtype``, only the arguments (an intrinsic that moves bytes)."""

    def __init__(self, context, builder, sig, args, dtype=None):
        self.context, self.builder, self.sig, self.args = context, builder, sig, args
        if dtype is None:
            return
        self.width = 32 if dtype == types.float32 else 64
        self.lanes = lanes(dtype)
        self.vt = ir.VectorType(context.get_value_type(dtype), self.lanes)
        self.load, self.store = _masked(builder, self.vt, self.width)

    def ints(self, *which):
        return [self.context.cast(self.builder, self.args[i], self.sig.args[i], types.int64)
                for i in which]

    def pointers(self, *which):
        return [make_array(self.sig.args[i])(self.context, self.builder, self.args[i]).data
                for i in which]

    def plain(self):
        """``(load, store)`` with the masked ones' arguments but plain memory accesses (the
        mask unread): for vectors known to be whole."""
        b, align = self.builder, 4 if self.width == 32 else 8
        return (lambda p, m, keep=None: b.load(p, align=align),
                lambda v, p, m: b.store(v, p, align=align))

    def _whole(self, tail):
        """Whether ``tail`` (an int64 value: the lanes of the last vector) is a whole vector.
        Callers may pass the lanes left in the row from the last vector on: every count of
        a vector or more is whole (the plane tiles' rows in two of AVX2's 8-lane vectors
        gave 24 and took the masked path, vmaskmovps, slow on AMD)."""
        return self.builder.icmp_signed(">=", tail, ir.Constant(_I64, self.lanes))

    def whole_or_masked(self, tail, emit):
        """``emit(load, store)`` twice, under a branch on ``tail`` (an int64 value: the
        lanes of the last vector): with plain loads and stores where it is whole, with
        masked ones otherwise. AVX-512 keeps a mask in a mask register; AVX2 has none,
        so a masked load builds its mask from vectors, and in a loop LLVM rebuilt it on
        every step and spilled the tile's other values for it (on a 2-core AMD EPYC a
        16 -> 64 3x3 conv at 15x15 took 1.5x as long with masked loads of whole
        vectors)."""
        with self.builder.if_else(self._whole(tail)) as (then, otherwise):
            with then:
                emit(*self.plain())
            with otherwise:
                emit(self.load, self.store)

    def checked_store(self, tail):
        """A ``store`` like the masked one that stores plainly where ``tail`` (an int64
        value: the lanes of the last vector) is whole: AVX2's masked stores are slow."""
        whole, plain = self._whole(tail), self.plain()[1]

        def store(v, p, m):
            with self.builder.if_else(whole) as (then, otherwise):
                with then:
                    plain(v, p, m)
                with otherwise:
                    self.store(v, p, m)
        return store

    def lanes_below(self, count):
        """The mask of a vector's first ``count`` lanes (an int64 value)."""
        it = ir.VectorType(_I64, self.lanes)
        return self.builder.icmp_signed("<", ir.Constant(it, list(range(self.lanes))),
                                        _splat(self.builder, count, it))

    def vector_at(self, pointer, index):
        """``pointer + index`` (elements) as a pointer to a vector."""
        return self.builder.bitcast(self.builder.gep(pointer, [index]),
                                    self.vt.as_pointer())

    def vector_masks(self, count, tail):
        """The masks of ``count`` vectors whose last one holds ``tail`` lanes (an int64
        value), the others all theirs."""
        return [ir.Constant(ir.VectorType(_I1, self.lanes), [1] * self.lanes)] * (count - 1) \
            + [self.lanes_below(tail)]


def tile(R: int, V: int, padded: bool = False):
    """The intrinsic ``tile(x, xo, offs, p0, w, wo, wr, wv, y, yo, ys, nc, kh, kw, ri, rj, rc,
    tail, more)`` described above, for ``R`` rows and ``V`` vectors (see the module's docstring).
    ``x``, ``w``, ``y`` are 1-d float arrays of one dtype, ``offs`` a 1-d int64 array; all
    offsets are in elements. ``padded``: every weight vector is whole (blocks filled up
    with zeros, as Conv2dDirect's and MatMulDirect's copies are), so it is read with a
    plain load and no prefetch hint. AVX2 has no mask registers: there a masked load
    costs a mask built from vectors, which LLVM rebuilt on every step and which pushed the
    broadcast inputs out of the 16 registers (squeezenet1_1's 16 -> 64 3x3 at 15x15, AMD
    EPYC: see conv_direct.ROWS)."""

    @intrinsic
    def call(typingctx, x, xo, offs, p0, w, wo, wr, wv, y, yo, ys, nc, kh, kw, ri, rj, rc,
             tail, more):
        sig = types.void(x, xo, offs, p0, w, wo, wr, wv, y, yo, ys, nc, kh, kw, ri, rj, rc,
                         tail, more)

        def codegen(context, builder, sig, args):
            a = _Args(context, builder, sig, args, y.dtype)
            n, vt = a.lanes, a.vt
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fma.v{n}f{a.width}")

            def at(base, index, vector=False):
                p = builder.gep(base, [index])
                return builder.bitcast(p, vt.as_pointer()) if vector else p

            def const(v):
                return ir.Constant(_I64, v)

            xp, op, wp, yp = a.pointers(0, 2, 4, 8)
            xo_, p0_, wo_, wr_, wv_, yo_, ys_ = a.ints(1, 3, 5, 6, 7, 9, 10)
            nc_, kh_, kw_, ri_, rj_, rc_, tail_, more_ = a.ints(*range(11, 19))
            masks = a.vector_masks(V, tail_)
            if not padded:
                prefetch = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32]),
                    "llvm.prefetch.p0i8")

            def emit(load, store):
                rows = [builder.add(xo_, builder.load(at(op, builder.add(p0_, const(r)))))
                        for r in range(R)]
                # zeroed on every call: an inlined tile runs inside its caller's loops
                acc = [[cgutils.alloca_once(builder, vt) for _ in range(V)]
                       for _ in range(R)]
                zero = ir.Constant(vt, [0.0] * n)
                with builder.if_else(builder.icmp_signed("!=", more_, const(0))) as (
                        go_on, start):
                    with go_on:  # once a tile: masked loads on AVX2 too
                        for r in range(R):
                            yr = builder.add(yo_, builder.mul(const(r), ys_))
                            for v in range(V):
                                builder.store(a.load(at(yp, builder.add(yr, const(v * n)),
                                                        True), masks[v], zero), acc[r][v])
                    with start:
                        for r in range(R):
                            for v in range(V):
                                builder.store(zero, acc[r][v])
                vectors = [builder.mul(const(v), wv_) for v in range(V)]
                # the channel loop's offsets into x and w, stepped by adds
                xa = cgutils.alloca_once(builder, _I64)
                wa = cgutils.alloca_once(builder, _I64)
                with cgutils.for_range(builder, kh_) as li:
                    xi = builder.mul(li.index, ri_)
                    wi = builder.mul(li.index, kw_)
                    with cgutils.for_range(builder, kw_) as lj:
                        builder.store(builder.add(xi, builder.mul(lj.index, rj_)), xa)
                        builder.store(builder.add(wo_, builder.mul(builder.mul(
                            builder.add(wi, lj.index), nc_), wr_)), wa)
                        with cgutils.for_range(builder, nc_):
                            xc, wc = builder.load(xa), builder.load(wa)
                            wv = [load(at(wp, builder.add(wc, vectors[v]), True), masks[v])
                                  for v in range(V)]
                            if not padded:
                                ahead = builder.add(wc, builder.mul(const(PREFETCH_ROWS),
                                                                    wr_))
                                for v in range(V):
                                    builder.call(prefetch, [builder.bitcast(
                                        at(wp, builder.add(ahead, vectors[v])), _I8P),
                                        ir.Constant(_I32, 0), ir.Constant(_I32, 3),
                                        ir.Constant(_I32, 1)])
                            for r in range(R):
                                b = _splat(builder, builder.load(
                                    at(xp, builder.add(rows[r], xc))), vt)
                                for v in range(V):
                                    builder.store(builder.call(
                                        fma, [b, wv[v], builder.load(acc[r][v])]), acc[r][v])
                            builder.store(builder.add(xc, rc_), xa)
                            builder.store(builder.add(wc, wr_), wa)
                for r in range(R):
                    yr = builder.add(yo_, builder.mul(const(r), ys_))
                    for v in range(V):
                        store(builder.load(acc[r][v]),
                              at(yp, builder.add(yr, const(v * n)), True), masks[v])

            if padded:  # whole weight vectors: only the last stores may need masks
                emit(a.plain()[0], a.checked_store(tail_))
            else:
                a.whole_or_masked(tail_, emit)
            return context.get_dummy_value()

        return sig, codegen

    return call


def _splat(builder, value, vt):
    """``value`` (a scalar) in every lane of a vector of type ``vt``."""
    one = builder.insert_element(ir.Constant(vt, None), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, None),
                                  ir.Constant(ir.VectorType(_I32, vt.count), [0] * vt.count))


def depthwise_tile(R: int, V: int):
    """The intrinsic ``depthwise_tile(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo,
    has_bias, y, yo, ys, tail)``: ``R`` output pixels by ``V`` vectors of ``LANES``
    channels of a depthwise convolution on channels-last arrays. For ``r < R`` and the
    channels ``v*LANES + l`` (``l < tail`` in the last vector)::

        y[yo + r*ys + v*LANES + l] = (bias[bo + v*LANES + l] if has_bias else 0)
            + w[wo + i*wi + j*wj + v*LANES + l] * x[xo + r*xs + i*ri + j*rj + v*LANES + l]
              for each tap (i, j), i < kh, j < kw, in row-major order

    One multiply and one add per tap, in the order of the loop kernels
    (depthwise_channels_last._tap_products, which skip the taps outside the input), so
    the results are theirs bit for bit: a pixel by a border passes only its taps inside
    (``kh``, ``kw`` and the offsets cut to them). The sums stay in registers; each tap's
    weights are loaded once for the ``R`` pixels."""

    @intrinsic
    def call(typingctx, x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo,
             ys, tail):
        sig = types.void(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo,
                         ys, tail)

        def codegen(context, builder, sig, args):
            a = _Args(context, builder, sig, args, y.dtype)
            L, vt = a.lanes, a.vt
            xo_, xs_, ri_, rj_, kh_, kw_, wo_, wi_, wj_, bo_, hb_, yo_, ys_, tail_ = \
                a.ints(1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 13, 15, 16, 17)
            xp, wp, bp, yp = a.pointers(0, 7, 11, 14)
            masks = a.vector_masks(V, tail_)
            zero = ir.Constant(vt, [0.0] * L)

            def const(v):
                return ir.Constant(_I64, v)

            def vec(base, index):
                return builder.bitcast(builder.gep(base, [index]), vt.as_pointer())

            def emit(load, store):
                acc = [[cgutils.alloca_once(builder, vt) for _ in range(V)] for _ in range(R)]
                start = [cgutils.alloca_once(builder, vt) for _ in range(V)]
                for v in range(V):
                    builder.store(zero, start[v])
                with builder.if_then(builder.icmp_unsigned("!=", hb_, const(0))):
                    for v in range(V):
                        builder.store(load(vec(bp, builder.add(bo_, const(v * L))), masks[v]),
                                      start[v])
                for v in range(V):
                    first = builder.load(start[v])
                    for r in range(R):
                        builder.store(first, acc[r][v])
                with cgutils.for_range(builder, kh_) as li:
                    xi = builder.add(xo_, builder.mul(li.index, ri_))
                    wii = builder.add(wo_, builder.mul(li.index, wi_))
                    with cgutils.for_range(builder, kw_) as lj:
                        xj = builder.add(xi, builder.mul(lj.index, rj_))
                        wj = builder.add(wii, builder.mul(lj.index, wj_))
                        wv = [load(vec(wp, builder.add(wj, const(v * L))), masks[v])
                              for v in range(V)]
                        for r in range(R):
                            xr = builder.add(xj, builder.mul(const(r), xs_))
                            for v in range(V):
                                xv = load(vec(xp, builder.add(xr, const(v * L))), masks[v])
                                builder.store(builder.fadd(builder.load(acc[r][v]),
                                                           builder.fmul(wv[v], xv)), acc[r][v])
                for r in range(R):
                    yr = builder.add(yo_, builder.mul(const(r), ys_))
                    for v in range(V):
                        store(builder.load(acc[r][v]), vec(yp, builder.add(yr, const(v * L))),
                              masks[v])

            a.whole_or_masked(tail_, emit)
            return context.get_dummy_value()

        return sig, codegen

    return call


@intrinsic
def rows_add(typingctx, y, rows, n, ys, b):
    """``rows_add(y, rows, n, ys, b)``: ``y[r*ys + c] += b[c]`` for ``r < rows``, ``c < n``,
    ``y`` a float array (any shape: its data from its first element on, ``ys`` elements
    a row) and ``b`` a 1-d one of its dtype. A bias added along the short rows of a
    channels-last block (24 output channels): LLVM's vector loop takes 32 values a step and
    left such rows to its scalar remainder; here each row is whole vectors and one masked
    one. The same ``fadd`` per element as that loop, so the same values."""
    sig = types.void(y, rows, n, ys, b)

    def codegen(context, builder, sig, args):
        a = _Args(context, builder, sig, args, y.dtype)
        rows_, n_, ys_ = a.ints(1, 2, 3)
        yp, bp = a.pointers(0, 4)
        lanes = ir.Constant(_I64, a.lanes)
        load, store = a.plain()
        nv = builder.udiv(n_, lanes)
        tail = builder.urem(n_, lanes)
        mask = a.lanes_below(tail)
        with cgutils.for_range(builder, rows_) as lr:
            row = builder.mul(lr.index, ys_)
            with cgutils.for_range(builder, nv) as lv:
                c = builder.mul(lv.index, lanes)
                at = a.vector_at(yp, builder.add(row, c))
                store(builder.fadd(load(at, None), load(a.vector_at(bp, c), None)), at, None)
            with builder.if_then(builder.icmp_signed("!=", tail, ir.Constant(_I64, 0))):
                c = builder.mul(nv, lanes)
                at = a.vector_at(yp, builder.add(row, c))
                a.store(builder.fadd(a.load(at, mask), a.load(a.vector_at(bp, c), mask)), at,
                        mask)
        return context.get_dummy_value()

    return sig, codegen
