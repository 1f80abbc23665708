"""The register tiles of the plane-by-plane depthwise forward (depthwise_loops.py) and of
the few-channel dense one (conv_planes.py), in LLVM IR like simd.py's tiles.

Numba's loop over a padded plane's wide rows (one pass per kernel row, the sums loaded and
stored for each, since LLVM cannot prove that the sums and the plane do not alias) ran in
256-bit vectors of separate multiplies and adds, then copied the outputs out of the wide
rows: 144 channels at 16x16, 3x3, one thread, 0.43 us a plane against 0.18 for the
channels-last tiles on the same shape. :func:`plane_tile` holds ``R`` output rows by ``V``
vectors of columns in registers over all the taps and writes the outputs, ReLU applied, in
their place.
"""
from contextlib import contextmanager

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .simd import _I64, _Args, _splat


def plane_tile(R: int, V: int, S: int):
    """The intrinsic ``plane_tile(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in,
    relu, y, yo, ys, tail)``: ``R`` rows by ``V`` vectors of ``LANES`` outputs of one plane
    of a depthwise convolution of stride ``s``, read from the padded input's ``s*s`` phase
    planes (depthwise_loops.fill_phases: ``hq`` rows of pitch ``xs`` each; at stride 1 the
    padded plane itself). For ``r < R`` and columns ``v*LANES + l`` (``l < tail`` in the
    last vector)::

        y[yo + r*ys + v*LANES + l] = (y[...] if acc_in else init)
            + w[wo + (i*kw + j)*wt] * x[xo + r*xs + v*LANES + l + at(i*dh, j*dw)]
              for each tap (i, j), i < kh, j < kw, in row-major order

    then ``max(., 0)`` where ``relu`` (a NaN kept), where ``at(a, b)`` is the offset of the
    padded plane's element ``(a, b)`` in its phase planes, ``((a%s*s + b%s)*hq + a//s)*xs +
    b//s``. One multiply and one add per tap (the order of simd.depthwise_tile). ``S`` is
    the stride as a constant (its divisions fold into shifts); ``S == 0`` reads ``s``."""

    @intrinsic
    def call(typingctx, x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y,
             yo, ys, tail):
        sig = types.void(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y,
                         yo, ys, tail)

        def codegen(context, builder, sig, args):
            a = _Args(context, builder, sig, args, y.dtype)
            L, vt = a.lanes, a.vt
            xo_, xs_, hq_, s_, kh_, kw_, dh_, dw_, wo_, wt_, ai_, re_, yo_, ys_, tail_ = \
                a.ints(1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 14, 16, 17, 18)
            xp, wp, yp = a.pointers(0, 9, 15)
            masks = a.vector_masks(V, tail_)
            zero = ir.Constant(vt, [0.0] * L)

            def const(v):
                return ir.Constant(_I64, v)

            stride = const(S) if S else s_

            def vec(base, index):
                return builder.bitcast(builder.gep(base, [index]), vt.as_pointer())

            def emit(load, store):
                outs = [[builder.add(yo_, builder.add(builder.mul(const(r), ys_), const(v * L)))
                         for v in range(V)] for r in range(R)]
                acc = [[cgutils.alloca_once(builder, vt) for _ in range(V)] for _ in range(R)]
                start = _splat(builder, context.cast(builder, args[12], sig.args[12], y.dtype), vt)
                accumulate = builder.icmp_unsigned("!=", ai_, const(0))
                for r in range(R):
                    for v in range(V):
                        builder.store(start, acc[r][v])
                with builder.if_then(accumulate):
                    for r in range(R):
                        for v in range(V):
                            builder.store(load(vec(yp, outs[r][v]), masks[v]), acc[r][v])
                with _taps(builder, stride, hq_, xs_, kh_, kw_, dh_, dw_) as (t, off):
                    wv = _splat(builder, builder.load(builder.gep(
                        wp, [builder.add(wo_, builder.mul(t, wt_))])), vt)
                    base = builder.add(xo_, off)
                    for r in range(R):
                        xr = builder.add(base, builder.mul(const(r), xs_))
                        for v in range(V):
                            xv = load(vec(xp, builder.add(xr, const(v * L))), masks[v])
                            builder.store(builder.fadd(builder.load(acc[r][v]),
                                                       builder.fmul(wv, xv)), acc[r][v])
                clip = builder.icmp_unsigned("!=", re_, const(0))
                for r in range(R):
                    for v in range(V):
                        f = builder.load(acc[r][v])
                        neg = builder.and_(builder.fcmp_ordered("<", f, zero),
                                           _splat(builder, clip, ir.VectorType(ir.IntType(1), L)))
                        store(builder.select(neg, zero, f), vec(yp, outs[r][v]), masks[v])

            a.whole_or_masked(tail_, emit)
            return context.get_dummy_value()

        return sig, codegen

    return call


@contextmanager
def _taps(builder, stride, hq, xs, kh, kw, dh, dw):
    """Loops over a kernel's taps ``(i, j)`` in row-major order, giving the tap's number
    ``i*kw + j`` and its offset in the phase planes (``hq`` rows of pitch ``xs`` each) of
    the padded plane, ``at(i*dh, j*dw)`` (see :func:`plane_tile`)."""
    plane = builder.mul(hq, xs)
    with cgutils.for_range(builder, kh) as li:
        ra = builder.mul(li.index, dh)
        # the tap row's phase and its row in that phase
        rowp = builder.add(builder.mul(builder.mul(builder.urem(ra, stride), stride), plane),
                           builder.mul(builder.udiv(ra, stride), xs))
        with cgutils.for_range(builder, kw) as lj:
            cb = builder.mul(lj.index, dw)
            off = builder.add(builder.add(rowp, builder.mul(builder.urem(cb, stride), plane)),
                              builder.udiv(cb, stride))
            yield builder.add(builder.mul(li.index, kw), lj.index), off


def _unrolled_taps(builder, S, K, hq, xs):
    """The taps of a ``K x K`` kernel of stride ``S`` and dilation 1 as :func:`_taps` gives
    them, each its own code: every offset is a sum of constant multiples of the phase
    plane's size and pitch, and no loop runs (a 3x3 stem's tap loops ran 3 steps each,
    their overhead as large as their 8 fused multiply-adds)."""
    plane = builder.mul(hq, xs)
    for i in range(K):
        for j in range(K):
            off = builder.add(builder.mul(ir.Constant(_I64, (i % S) * S + j % S), plane),
                              builder.add(builder.mul(ir.Constant(_I64, i // S), xs),
                                          ir.Constant(_I64, j // S)))
            yield ir.Constant(_I64, i * K + j), off


def channel_tile(R: int, Y: int, V: int, S: int, K: int = 0):
    """The intrinsic ``channel_tile(x, xo, xs, hq, s, nc, xc, kh, kw, dh, dw, w, wo, wr, y,
    yo, ys, yr, tail)``: ``R`` output channels by ``Y`` rows by ``V`` vectors of ``LANES``
    columns of the output of a dense convolution over ``nc`` input channels, each read
    from its padded plane's ``s*s`` phase planes (channel ``c``'s at ``xo + c*xc``, laid
    out as for :func:`plane_tile`; output row ``q`` reads from phase row ``q`` on). For
    ``r < R``, columns ``v*LANES + l`` (``l < tail`` in the last vector) and rows
    ``q < Y``::

        y[yo + r*ys + q*yr + v*LANES + l] = sum over (c, i, j) in that order of
            w[wo + r*wr + (c*kh + i)*kw + j]
            * x[xo + c*xc + q*xs + v*LANES + l + at(i*dh, j*dw)]

    one fused multiply-add per term, from zero (an OIHW weight: ``wr = nc*kh*kw``). Where
    the channels are few (an image's three), the sums over pixels x output channels of
    simd.tile have few terms to share the cost of a tile and of its transpose into NCHW;
    here the tile's sums are a run of the output row itself. ``S`` is the stride as a
    constant; ``S == 0`` reads ``s``. ``K > 0``: the kernel is ``K x K`` with dilation 1
    whatever ``kh``, ``kw``, ``dh``, ``dw`` say, its taps unrolled where every vector is
    whole (:func:`_unrolled_taps`; ``S`` must then be given; a partial vector's tile, at
    the end of an odd row, keeps the loops and their smaller code)."""
    if K and not S:
        raise ValueError("an unrolled channel_tile needs its stride as a constant")

    @intrinsic
    def call(typingctx, x, xo, xs, hq, s, nc, xc, kh, kw, dh, dw, w, wo, wr, y, yo, ys, yr,
             tail):
        sig = types.void(x, xo, xs, hq, s, nc, xc, kh, kw, dh, dw, w, wo, wr, y, yo, ys, yr,
                         tail)

        def codegen(context, builder, sig, args):
            a = _Args(context, builder, sig, args, y.dtype)
            L, vt = a.lanes, a.vt
            xo_, xs_, hq_, s_, nc_, xc_, kh_, kw_, dh_, dw_, wo_, wr_, yo_, ys_, yr_, tail_ = \
                a.ints(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 15, 16, 17, 18)
            xp, wp, yp = a.pointers(0, 11, 14)
            masks = a.vector_masks(V, tail_)
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fma.v{L}f{a.width}")

            def const(v):
                return ir.Constant(_I64, v)

            def vec(base, index):
                return builder.bitcast(builder.gep(base, [index]), vt.as_pointer())

            stride = const(S) if S else s_
            def emit(load, store):
                cells = [(q, v) for q in range(Y) for v in range(V)]
                acc = [[cgutils.alloca_once(builder, vt) for _ in cells] for _ in range(R)]
                for r in range(R):
                    for u in range(len(cells)):
                        builder.store(ir.Constant(vt, [0.0] * L), acc[r][u])
                taps = const(K * K) if K else builder.mul(kh_, kw_)
                with cgutils.for_range(builder, nc_) as lc:
                    xc0 = builder.add(xo_, builder.mul(lc.index, xc_))
                    wc0 = builder.add(wo_, builder.mul(lc.index, taps))

                    def tap(t, off):
                        base = builder.add(xc0, off)
                        rows = [builder.add(base, builder.mul(const(q), xs_)) for q in range(Y)]
                        xv = [load(vec(xp, builder.add(rows[q], const(v * L))), masks[v])
                              for q, v in cells]
                        wt = builder.add(wc0, t)
                        for r in range(R):
                            wv = _splat(builder, builder.load(builder.gep(
                                wp, [builder.add(wt, builder.mul(const(r), wr_))])), vt)
                            for u in range(len(cells)):
                                builder.store(builder.call(fma, [wv, xv[u],
                                                                 builder.load(acc[r][u])]),
                                              acc[r][u])
                    if K and load is not a.load:  # a masked tile keeps its loops
                        for t, off in _unrolled_taps(builder, S, K, hq_, xs_):
                            tap(t, off)
                    else:
                        kh, kw, dh, dw = (const(K), const(K), const(1), const(1)) if K else \
                            (kh_, kw_, dh_, dw_)
                        with _taps(builder, stride, hq_, xs_, kh, kw, dh, dw) as (t, off):
                            tap(t, off)
                for r in range(R):
                    for u, (q, v) in enumerate(cells):
                        at = builder.add(builder.add(yo_, builder.mul(const(r), ys_)),
                                         builder.add(builder.mul(const(q), yr_), const(v * L)))
                        store(builder.load(acc[r][u]), vec(yp, at), masks[v])

            a.whole_or_masked(tail_, emit)
            return context.get_dummy_value()

        return sig, codegen

    return call


def _chunks(a, n_, body):
    """``body(i0, lanes_used)`` for each vector of ``n_`` elements: ``i0`` its first
    element, ``lanes_used`` the mask of its lanes below ``n_``."""
    builder, L = a.builder, a.lanes
    it = ir.VectorType(_I64, L)
    lane = ir.Constant(it, list(range(L)))
    chunks = builder.udiv(builder.add(n_, ir.Constant(_I64, L - 1)), ir.Constant(_I64, L))
    with cgutils.for_range(builder, chunks) as lk:
        i0 = builder.mul(lk.index, ir.Constant(_I64, L))
        left = _splat(builder, builder.sub(n_, i0), it)
        body(i0, builder.icmp_signed("<", lane, left))


def _whole_vectors(a, n_, body):
    """``body(i0)`` for whole vectors covering ``n_ >= LANES`` elements, the last one
    starting ``LANES`` before the end (overlapping the one before it: the bodies here
    copy, so writing an element twice writes the same value). AVX2 has no mask registers,
    and AMD's masked stores (``vmaskmovps``) run several times slower than plain ones: a
    stem's stride phases took 1.4 ns an element to fill with them."""
    builder, L = a.builder, ir.Constant(_I64, a.lanes)
    with cgutils.for_range(builder, builder.udiv(n_, L)) as lk:
        body(builder.mul(lk.index, L))
    with builder.if_then(builder.icmp_unsigned("!=", builder.urem(n_, L), _I64(0))):
        body(builder.sub(n_, L))


@intrinsic
def copy_row(typingctx, y, yo, x, xo, n):
    """``y[yo + c] = x[xo + c]`` for ``c < n``, in vectors (masked where the row is shorter
    than one): a padded plane's rows are short (16 elements at 16x16), and Numba's loop,
    vectorised 32 or 64 elements at a time behind a check that the arrays do not overlap,
    copied them one element at a time. ``y`` and ``x`` must not overlap."""
    sig = types.void(y, yo, x, xo, n)

    def codegen(context, builder, sig, args):
        a = _Args(context, builder, sig, args, y.dtype)
        yo_, xo_, n_ = a.ints(1, 3, 4)
        yp, xp = a.pointers(0, 2)
        plain_load, plain_store = a.plain()

        def vec(base, index):
            return builder.bitcast(builder.gep(base, [index]), a.vt.as_pointer())

        def body(i0, m):
            a.store(a.load(vec(xp, builder.add(xo_, i0)), m), vec(yp, builder.add(yo_, i0)), m)

        def whole(i0):
            plain_store(plain_load(vec(xp, builder.add(xo_, i0)), None),
                        vec(yp, builder.add(yo_, i0)), None)

        with builder.if_else(builder.icmp_signed(">=", n_, _I64(a.lanes))) as (then, short):
            with then:
                _whole_vectors(a, n_, whole)
            with short:
                _chunks(a, n_, body)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def split_row(typingctx, y, e0, e1, x, xo, n):
    """``y[e0 + c//2] = x[xo + c]`` for even ``c < n``, ``y[e1 + c//2] = x[xo + c]`` for odd:
    a row of a stride-2 conv's padded plane into its two column phases, each vector of a
    phase shuffled from two vectors of the row (even lanes, odd lanes). Numba's loop read
    every other element one at a time. Rows of two vectors or more run in whole vectors
    (:func:`_whole_vectors`), an odd row's last element on its own; shorter ones masked.
    ``y`` and ``x`` must not overlap."""
    sig = types.void(y, e0, e1, x, xo, n)

    def codegen(context, builder, sig, args):
        a = _Args(context, builder, sig, args, y.dtype)
        L = a.lanes
        e0_, e1_, xo_, n_ = a.ints(1, 2, 4, 5)
        yp, xp = a.pointers(0, 3)
        plain_load, plain_store = a.plain()
        i32 = ir.VectorType(ir.IntType(32), L)
        it = ir.VectorType(_I64, L)
        evens = ir.Constant(i32, list(range(0, 2 * L, 2)))
        odds = ir.Constant(i32, list(range(1, 2 * L, 2)))
        two, one = _I64(2), _I64(1)

        def vec(base, index):
            return builder.bitcast(builder.gep(base, [index]), a.vt.as_pointer())

        def below(first, count):
            """The lanes ``first + l < count``."""
            return builder.icmp_signed("<", ir.Constant(it, list(range(first, first + L))),
                                       _splat(builder, count, it))

        def body(i0, _):
            src = builder.add(xo_, builder.mul(i0, two))
            left = builder.sub(n_, builder.mul(i0, two))  # row elements from lane 0 on
            lo = a.load(vec(xp, src), below(0, left))
            hi = a.load(vec(xp, builder.add(src, _I64(L))), below(L, left))
            a.store(builder.shuffle_vector(lo, hi, evens), vec(yp, builder.add(e0_, i0)),
                    below(0, builder.udiv(builder.add(left, one), two)))
            a.store(builder.shuffle_vector(lo, hi, odds), vec(yp, builder.add(e1_, i0)),
                    below(0, builder.udiv(left, two)))

        def whole(i0):  # the pairs i0 .. i0 + L - 1
            src = builder.add(xo_, builder.mul(i0, two))
            lo = plain_load(vec(xp, src), None)
            hi = plain_load(vec(xp, builder.add(src, _I64(L))), None)
            plain_store(builder.shuffle_vector(lo, hi, evens), vec(yp, builder.add(e0_, i0)),
                        None)
            plain_store(builder.shuffle_vector(lo, hi, odds), vec(yp, builder.add(e1_, i0)),
                        None)

        with builder.if_else(builder.icmp_signed(">=", n_, _I64(2 * L))) as (then, short):
            with then:
                pairs = builder.udiv(n_, two)
                _whole_vectors(a, pairs, whole)
                with builder.if_then(builder.icmp_unsigned("!=", builder.urem(n_, two),
                                                           _I64(0))):
                    last = builder.load(builder.gep(xp, [builder.add(xo_, builder.sub(n_, one))]))
                    builder.store(last, builder.gep(yp, [builder.add(e0_, pairs)]))
            with short:
                _chunks(a, builder.udiv(builder.add(n_, one), two), body)
        return context.get_dummy_value()

    return sig, codegen
