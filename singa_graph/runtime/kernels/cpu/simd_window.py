"""Strided window maxima in LLVM IR: a max pool's output row folded in vector registers
(for pool.py; why LLVM IR at all is simd.py's docstring)."""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .simd import _I32, _I64, _Args, _splat


def window_max(S: int, KW: int = 0, G: int = 1):
    """The intrinsic ``window_max(x, xo, rs, rows, kw, c0, w, y, yo, n, gs, ys)``: ``G``
    output rows of a max pool. For ``i < n`` and ``g < G``::

        y[yo + g*ys + i] = fold of x[xo + g*gs + r*rs + c] over r < rows, then over the
                           columns c = c0 + i*S + j (j < kw) with 0 <= c < w

    where the fold starts from the window's first cell inside the plane and keeps the
    running value ``m`` unless a cell ``v > m``, the same as the scalar fold over the
    window's cells in row-major order (a NaN in the first cell kept, later NaNs skipped).
    ``xo`` is the offset of the first row's column 0; ``rows`` must be at least 1 and every
    window must have a column inside ``[0, w)``.

    A vector of ``LANES`` outputs is held in a register over its window. A column outside
    the plane is a masked-off lane that loads as -inf, which leaves any running value as it
    is, so the borders (padding, ceil mode) need no scalar code; the first cell folds with
    itself (``v > v`` is false, NaN included). A stride-2 row of cells is two contiguous
    loads (the second one column early) and a shuffle of every other lane. Only cells inside the plane are read and only
    ``y[yo:yo + n]`` is written. Strides 1 and 2; with ``KW`` > 0 the windows are ``KW``
    wide whatever ``kw`` says, and their columns are unrolled.

    A row of at least ``LANES`` outputs runs in whole vectors only: its last vector starts
    ``LANES`` outputs before the row's end, overlapping the one before it (whose outputs it
    writes again, with the same values), and a vector whose windows are all inside the
    plane loads and stores without masks. AVX2 has no mask registers: a masked load builds
    its mask in a vector register, and AMD's masked stores (``vmaskmovps``) run several
    times slower than plain ones. Rows shorter than a vector keep the masks."""
    if S not in (1, 2):
        raise ValueError(f"window_max supports strides 1 and 2, not {S}")

    @intrinsic
    def call(typingctx, x, xo, rs, rows, kw, c0, w, y, yo, n, gs, ys):
        sig = types.void(x, xo, rs, rows, kw, c0, w, y, yo, n, gs, ys)

        def codegen(context, builder, sig, args):
            a = _Args(context, builder, sig, args, y.dtype)
            L, vt = a.lanes, a.vt
            plain_load = a.plain()[0]
            it = ir.VectorType(_I32, L)  # columns and lane numbers: one compare per mask
            xo_, rs_, rows_, kw_, c0_, w_, yo_, n_, gs_, ys_ = a.ints(1, 2, 3, 4, 5, 6, 8, 9,
                                                                      10, 11)
            xp, yp = a.pointers(0, 7)
            lane = ir.Constant(it, list(range(L)))
            # a stride-2 row of cells: lanes 2i of the columns from col0 (the first half's
            # lanes, then the second's, loaded one column early so that no load reads past
            # the last window's last column)
            evens = ir.Constant(ir.VectorType(_I32, L),
                                [2 * i if 2 * i < L else 2 * i + 1 for i in range(L)])
            w32 = _splat(builder, builder.trunc(w_, _I32), it)

            def const(v):
                return ir.Constant(_I64, v)

            def splat32(v):
                return _splat(builder, builder.trunc(v, _I32), it)

            def vec(index):
                return builder.bitcast(builder.gep(xp, [index]), vt.as_pointer())

            # a row of a vector or more: its vectors are all whole, the last one overlapping
            whole = builder.icmp_signed(">=", n_, const(L))
            chunks = builder.udiv(builder.add(n_, const(L - 1)), const(L))
            with cgutils.for_range(builder, chunks) as lk:
                i0 = builder.mul(lk.index, const(L))
                i0 = builder.select(whole, builder.select(builder.icmp_signed(
                    "<", i0, builder.sub(n_, const(L))), i0, builder.sub(n_, const(L))), i0)
                left = builder.sub(n_, i0)
                count = builder.select(builder.icmp_signed("<", left, const(L)), left, const(L))
                col0 = builder.add(c0_, builder.mul(i0, const(S)))  # lane 0's first column
                # per loaded half: its offset from col0, its lanes' columns at j = 0, and
                # the lanes that hold cells of the outputs in use
                if S == 1:
                    spans = [(0, builder.add(splat32(col0), lane),
                              builder.icmp_signed("<", lane, splat32(count)))]
                else:
                    used = splat32(builder.sub(builder.mul(count, const(2)), const(1)))
                    spans = [(h, builder.add(splat32(builder.add(col0, const(h))), lane),
                              builder.icmp_signed("<", builder.add(lane, ir.Constant(
                                  it, [h] * L)), used)) for h in (0, L - 1)]

                def cells(row, j, keep, edges, masked):
                    """The cells at column offset ``j`` of a row; with ``edges``, lanes whose
                    column is outside the plane take ``keep``'s values (a splat). Without
                    ``masked`` every lane's cell is inside the plane: plain loads."""
                    got = []
                    for off, cols, use in spans:
                        at = vec(builder.add(row, builder.add(builder.add(col0, const(off)), j)))
                        if not masked:
                            got.append(plain_load(at, None))
                            continue
                        mask = use
                        if edges:  # one unsigned compare: a column left of 0 wraps past w
                            mask = builder.and_(use, builder.icmp_unsigned(
                                "<", builder.add(cols, splat32(j)), w32))
                        got.append(a.load(at, mask, keep))
                    return got[0] if S == 1 else builder.shuffle_vector(got[0], got[1], evens)

                accs = [cgutils.alloca_once(builder, vt) for _ in range(G)]
                starts = [builder.add(xo_, builder.mul(gs_, const(g))) for g in range(G)]
                lowest = ir.Constant(vt, [float("-inf")] * L)

                def window(edges, masked=True):
                    for start, acc in zip(starts, accs):
                        # each lane's first cell inside the plane: at j = 0, or for a window
                        # hanging over the left border (by less than a window) column 0
                        edge = _splat(builder, builder.load(builder.gep(xp, [start])), vt)
                        builder.store(cells(start, const(0), edge, edges, masked), acc)
                    with cgutils.for_range(builder, rows_) as lr:
                        step = builder.mul(lr.index, rs_)

                        def fold(j):
                            for start, acc in zip(starts, accs):
                                m = builder.load(acc)
                                # a cell outside loads as -inf, and -inf > m is false for
                                # any m (NaN too): the fold passes it by without waiting on m
                                v = cells(builder.add(start, step), j, lowest, edges, masked)
                                builder.store(
                                    builder.select(builder.fcmp_ordered(">", v, m), v, m), acc)
                        if KW:
                            for j in range(KW):
                                fold(const(j))
                        else:
                            with cgutils.for_range(builder, kw_) as lj:
                                fold(lj.index)

                # the vectors whose windows are all inside the row need no column masks
                reach = builder.add(builder.add(col0, builder.mul(
                    builder.sub(count, const(1)), const(S))), const(KW) if KW else kw_)
                inner = builder.and_(builder.icmp_signed(">=", col0, const(0)),
                                     builder.icmp_signed("<=", reach, w_))
                with builder.if_else(builder.and_(inner, whole)) as (plain, other):
                    with plain:
                        window(False, masked=False)
                    with other:
                        with builder.if_else(inner) as (inside, border):
                            with inside:
                                window(False)
                            with border:
                                window(True)
                store = a.checked_store(count)  # count is L where whole
                for g, acc in enumerate(accs):
                    at = builder.bitcast(builder.gep(yp, [builder.add(builder.add(
                        yo_, builder.mul(ys_, const(g))), i0)]), vt.as_pointer())
                    store(builder.load(acc), at, builder.icmp_signed("<", lane, splat32(count)))
            return context.get_dummy_value()

        return sig, codegen

    return call


#: vectors of channels :func:`cells_max` folds side by side
GROUP = 4


@intrinsic
def cells_max(typingctx, x, xo, rs, cs, rows, cols, y, yo, n):
    """``cells_max(x, xo, rs, cs, rows, cols, y, yo, n)``: a channels-innermost max pool's
    output pixel. For ``c < n``::

        y[yo + c] = fold of x[xo + r*rs + j*cs + c] over the cells (r, j), r < rows, j < cols

    in row-major order, from the first cell, keeping the running value ``m`` unless a
    cell's ``v > m``: the fold of :func:`window_max` and of the plane-by-plane pools, so
    their results agree bit for bit. ``rows`` and ``cols`` must be at least 1.

    Each vector of ``LANES`` channels is held in a register over the whole window and
    stored once. The scalar loop this replaces (Numba's, over the channels of one cell at a
    time) loaded and stored the running values at every cell, behind LLVM's overlap check
    of ``x`` and ``y``. Channel counts of a vector or more run in whole vectors, the last one
    overlapping the one before it (it writes the same values again); fewer take masks."""
    sig = types.void(x, xo, rs, cs, rows, cols, y, yo, n)

    def codegen(context, builder, sig, args):
        a = _Args(context, builder, sig, args, y.dtype)
        L, vt, vec = a.lanes, a.vt, a.vector_at
        xo_, rs_, cs_, rows_, cols_, yo_, n_ = a.ints(1, 2, 3, 4, 5, 7, 8)
        xp, yp = a.pointers(0, 6)

        def const(v):
            return ir.Constant(_I64, v)

        def chunk(c0, V, load, store, mask):
            """``V`` vectors of channels from ``c0`` on, each in its own register: the
            folds of one vector wait on each other, those of ``V`` vectors do not."""
            accs = [cgutils.alloca_once(builder, vt) for _ in range(V)]
            base = builder.add(xo_, c0)
            for v, acc in enumerate(accs):
                builder.store(load(vec(xp, builder.add(base, const(v * L))), mask), acc)
            with cgutils.for_range(builder, rows_) as lr:
                row = builder.add(base, builder.mul(lr.index, rs_))
                with cgutils.for_range(builder, cols_) as lj:
                    cell = builder.add(row, builder.mul(lj.index, cs_))
                    for v, acc in enumerate(accs):
                        # the first cell folds with itself: v > v is false, NaN too
                        x_ = load(vec(xp, builder.add(cell, const(v * L))), mask)
                        m = builder.load(acc)
                        builder.store(builder.select(builder.fcmp_ordered(">", x_, m), x_, m),
                                      acc)
            for v, acc in enumerate(accs):
                store(builder.load(acc), vec(yp, builder.add(yo_, builder.add(c0, const(v * L)))),
                      mask)

        load, store = a.plain()
        whole = builder.icmp_signed(">=", n_, const(L))
        with builder.if_else(whole) as (vectors, short):
            with vectors:
                nv = builder.udiv(n_, const(L))
                groups = builder.udiv(nv, const(GROUP))
                with cgutils.for_range(builder, groups) as lk:
                    chunk(builder.mul(lk.index, const(GROUP * L)), GROUP, load, store, None)
                with cgutils.for_range(builder, builder.sub(nv, builder.mul(
                        groups, const(GROUP)))) as lk:
                    c0 = builder.mul(builder.add(builder.mul(groups, const(GROUP)), lk.index),
                                     const(L))
                    chunk(c0, 1, load, store, None)
                with builder.if_then(builder.icmp_signed("!=", builder.urem(n_, const(L)),
                                                         const(0))):
                    chunk(builder.sub(n_, const(L)), 1, load, store, None)
            with short:
                chunk(const(0), 1, a.load, a.store, a.lanes_below(n_))
        return context.get_dummy_value()

    return sig, codegen
