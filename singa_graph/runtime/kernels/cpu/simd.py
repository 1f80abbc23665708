"""Register-blocked multiply-add tiles written in LLVM IR, for the kernels whose sums must
stay in vector registers (conv_direct.py).

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
(pixels that wrap to the next image row, or to the next sample). The loops over ``i``,
``j``, ``c`` are ordinary LLVM loops; only the tile's own dimensions are unrolled.
"""
from llvmlite import ir, ir_layer_typed_pointers_enabled
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

#: bytes of one vector register (AVX-512); LLVM splits wider-than-native vectors itself
VECTOR_BYTES = 64

_I1, _I32, _I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)


def lanes(dtype) -> int:
    """Values of ``dtype`` (a numpy or Numba float dtype) in one vector."""
    return VECTOR_BYTES // (4 if str(dtype) == "float32" else 8)


def _masked(builder, vt, width):
    """``(load(ptr, mask), store(value, ptr, mask))`` of LLVM's masked memory intrinsics."""
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
    return (lambda p, m: builder.call(load, [p, align, m, ir.Constant(vt, None)]),
            lambda v, p, m: builder.call(store, [v, p, align, m]))


def tile(R: int, V: int):
    """The intrinsic ``tile(x, xo, offs, p0, w, wo, wr, wv, y, yo, ys, nc, kh, kw, ri, rj, rc,
    tail)`` described above, for ``R`` rows and ``V`` vectors (see the module's docstring).
    ``x``, ``w``, ``y`` are 1-d float arrays of one dtype, ``offs`` a 1-d int64 array; all
    offsets are in elements."""

    @intrinsic
    def call(typingctx, x, xo, offs, p0, w, wo, wr, wv, y, yo, ys, nc, kh, kw, ri, rj, rc,
             tail):
        sig = types.void(x, xo, offs, p0, w, wo, wr, wv, y, yo, ys, nc, kh, kw, ri, rj, rc,
                         tail)

        def codegen(context, builder, sig, args):
            tys = sig.args
            ft = context.get_value_type(y.dtype)
            width = 32 if y.dtype == types.float32 else 64
            n = lanes(y.dtype)
            vt = ir.VectorType(ft, n)
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fma.v{n}f{width}")
            load, store = _masked(builder, vt, width)

            def num(i):
                return context.cast(builder, args[i], tys[i], types.int64)

            def data(i):
                return make_array(tys[i])(context, builder, args[i]).data

            def at(base, index, vector=False):
                p = builder.gep(base, [index])
                return builder.bitcast(p, vt.as_pointer()) if vector else p

            def const(v):
                return ir.Constant(_I64, v)

            xp, op, wp, yp = data(0), data(2), data(4), data(8)
            xo_, p0_, wo_, wr_, wv_, yo_, ys_ = (num(i) for i in (1, 3, 5, 6, 7, 9, 10))
            nc_, kh_, kw_, ri_, rj_, rc_, tail_ = (num(i) for i in range(11, 18))
            lane = ir.Constant(ir.VectorType(_I64, n), list(range(n)))
            splat = ir.Constant(ir.VectorType(_I32, n), [0] * n)
            tails = builder.insert_element(ir.Constant(ir.VectorType(_I64, n), None), tail_,
                                           ir.Constant(_I32, 0))
            last = builder.icmp_signed("<", lane, builder.shuffle_vector(
                tails, ir.Constant(ir.VectorType(_I64, n), None), splat))
            full = ir.Constant(ir.VectorType(_I1, n), [1] * n)
            masks = [full] * (V - 1) + [last]
            rows = [builder.add(xo_, builder.load(at(op, builder.add(p0_, const(r)))))
                    for r in range(R)]
            # zeroed on every call: an inlined tile runs inside its caller's loops
            acc = [[cgutils.alloca_once(builder, vt) for _ in range(V)] for _ in range(R)]
            for r in range(R):
                for v in range(V):
                    builder.store(ir.Constant(vt, [0.0] * n), acc[r][v])
            vectors = [builder.mul(const(v), wv_) for v in range(V)]
            with cgutils.for_range(builder, kh_) as li:
                xi = builder.mul(li.index, ri_)
                wi = builder.mul(li.index, kw_)
                with cgutils.for_range(builder, kw_) as lj:
                    xj = builder.add(xi, builder.mul(lj.index, rj_))
                    wj = builder.mul(builder.add(wi, lj.index), nc_)
                    with cgutils.for_range(builder, nc_) as lc:
                        xc = builder.add(xj, builder.mul(lc.index, rc_))
                        wa = builder.add(wo_, builder.mul(builder.add(wj, lc.index), wr_))
                        wv = [load(at(wp, builder.add(wa, vectors[v]), True),
                                   masks[v]) for v in range(V)]
                        for r in range(R):
                            s = builder.load(at(xp, builder.add(rows[r], xc)))
                            b = builder.shuffle_vector(
                                builder.insert_element(ir.Constant(vt, None), s,
                                                       ir.Constant(_I32, 0)),
                                ir.Constant(vt, None), splat)
                            for v in range(V):
                                builder.store(builder.call(fma, [b, wv[v],
                                                                 builder.load(acc[r][v])]),
                                              acc[r][v])
            for r in range(R):
                yr = builder.add(yo_, builder.mul(const(r), ys_))
                for v in range(V):
                    store(builder.load(acc[r][v]), at(yp, builder.add(yr, const(v * n)), True),
                          masks[v])
            return context.get_dummy_value()

        return sig, codegen

    return call
