"""The fused epilogue of a convolution: bias, residual add and activation on a finished
output block, while it is still in cache.

Any convolution path (im2col + GEMM, pointwise GEMM, direct depthwise, Winograd) calls
:func:`conv_epilogue` on the ``(O, L)`` output block of one sample (or any 2-d block whose
rows are output channels) once the block is complete. The inference passes
(passes/inference.py) set the op attributes it reads: ``act`` and ``residual`` on Conv2d.

Bit-for-bit agreement with the unfused graph: every step is the same scalar operation, in
the same order and the same dtype, as the op it replaces, and each step's result is stored
into the output (rounded to its dtype) before the next reads it, exactly as the separate
ops' buffers would hold it. The activations are the formulas of
:mod:`singa_graph.ops.formulas`, compiled by :func:`..generate.compiled_formulas`, the same
definitions the elementwise ops' generated kernels evaluate.
"""
import numpy as np
from numba import njit
from numba.extending import overload

from ....ops import formulas
from ..generate import compiled_formulas
from .simd import rows_add

#: activation codes of the epilogue (``Conv2d.act`` names -> code)
NONE, RELU, RELU6, HARDSWISH, SILU, SIGMOID, HARDSIGMOID = range(7)
ACT_CODES = {"": NONE, "relu": RELU, "relu6": RELU6, "hardswish": HARDSWISH, "silu": SILU,
             "sigmoid": SIGMOID, "hardsigmoid": HARDSIGMOID}

_f = compiled_formulas(("relu", "relu6", "hardsigmoid", "sigmoid"), "cpu")
_relu, _relu6, _hardsigmoid, _sigmoid = _f.relu, _f.relu6, _f.hardsigmoid, _f.sigmoid


def act_code(op) -> int:
    """The epilogue code of a Conv2d's ``act`` attribute."""
    return ACT_CODES[getattr(op, "act", "") or ""]


def epilogue_args(op, ins, y_rows) -> tuple:
    """``(bias, has_bias, res, has_res, act, alpha, beta, k)``, the epilogue's arguments in
    :func:`conv_epilogue`'s order, of a conv step with inputs ``ins`` (input, weight[,
    bias][, residual] as the op has them) whose output is viewed as ``y_rows``: an empty
    bias where there is none, the residual viewed like ``y_rows`` (``y_rows`` itself where
    there is none)."""
    has_res = bool(getattr(op, "residual", False))
    has_bias = len(ins) - has_res == 3
    bias = ins[2] if has_bias else y_rows.reshape(-1)[:0]
    res = y_rows
    if has_res:
        res = ins[-1].reshape(y_rows.shape)
        if res.size and not np.may_share_memory(res, ins[-1]):  # a copy would go stale
            raise ValueError(f"conv epilogue needs a contiguous residual, got strides "
                             f"{ins[-1].strides} for shape {ins[-1].shape}")
    return (bias, has_bias, res, has_res, act_code(op)) + act_args(op, y_rows.dtype)


def act_args(op, dtype) -> tuple:
    """``(alpha, beta, k)`` of a Conv2d's epilogue in ``dtype``: the HardSigmoid constants of
    HARDSWISH and HARDSIGMOID and the formulas' constants (:func:`singa_graph.ops.formulas.constants`)."""
    t = dtype.type
    alpha, beta = (t(v) for v in getattr(op, "act_args", (0.0, 0.0)))
    return alpha, beta, formulas.constants(dtype)


def _joined(y):
    """``y`` with its rows joined into one row where they are contiguous."""


@overload(_joined)
def _joined_rows(y):
    # A block of short rows (a channels-last block of 24 channels) left the vector loops of
    # LLVM, which take 32 values a step, to their scalar remainder: 2048 x 24 with ReLU 26
    # -> 9 us as one row (AMD EPYC). Numba knows the layout when it compiles: a C-contiguous
    # block is reshaped, any other kept as it is.
    if getattr(y, "layout", "") == "C":
        return lambda y: y.reshape(1, y.size)
    return lambda y: y


# fastmath=False pinned: unset, it would inherit the flags of the first (fast-math) kernel
# that compiles it, for every caller (see generate._CPU_FLAGS).
#
# One pass per step over the whole block, indexed ``y[p, o]``: taking a view per row (``r =
# y[p]``, reference-counted) cost more than the arithmetic on the short rows of channels-last
# blocks and small planes: 2048 x 8 with bias and ReLU 40 -> 9 us, 512 x 16 12 -> 5, 1280 x 4
# (an NCHW block of 2x2 planes) 28 -> 7 (one thread, 2026-11-27). A single fused pass per
# element was not faster where every step is present, and branches on the steps inside its
# inner loop stopped LLVM from vectorising it.
@njit(cache=True, nogil=True, fastmath=False)
def block_epilogue(y, bias, has_bias, bias_on_rows, res, has_res, act, alpha, beta, k):
    """``y = act(y + bias + res)`` in place on the 2-d block ``y``, step by step: ``bias``
    is added along the rows (``bias[p]`` to row ``p``: an ``(O, L)`` NCHW block) or along
    the columns (``bias[o]`` to column ``o``: a ``(P, O)`` channels-last one); ``res`` is a
    block like ``y``. See :func:`conv_epilogue` for the arguments."""
    p_, o_ = y.shape
    if has_bias and bias_on_rows:
        for p in range(p_):
            b = bias[p]
            for o in range(o_):
                y[p, o] = y[p, o] + b
    elif has_bias and (o_ < 2 or y.strides[1] == y.itemsize):
        # along short rows of channels (24 of them): whole vectors and a masked one, not
        # LLVM's 32-value steps and their scalar remainder (2048 x 24, one thread, 14.2 ->
        # 8.5 us; AMD EPYC, 2026-11-29)
        rows_add(y, p_, o_, y.strides[0] // y.itemsize, bias)
    elif has_bias:
        for p in range(p_):
            for o in range(o_):
                y[p, o] = y[p, o] + bias[o]
    if has_res:
        yj, rj = _joined(y), _joined(res)
        if yj.shape == rj.shape:
            _add_into(yj, rj)
        else:
            _add_into(y, res)
    y = _joined(y)
    p_, o_ = y.shape
    z = k[0]
    if act == RELU:
        for p in range(p_):
            for o in range(o_):
                y[p, o] = _relu(y[p, o], z, z, k)
    elif act == RELU6:
        for p in range(p_):
            for o in range(o_):
                y[p, o] = _relu6(y[p, o], z, z, k)
    elif act == HARDSWISH:
        for p in range(p_):
            for o in range(o_):
                v = y[p, o]
                y[p, o] = _hardsigmoid(v, alpha, beta, k)  # rounded as the HardSigmoid op's
                y[p, o] = v * y[p, o]
    elif act == SILU:
        for p in range(p_):
            for o in range(o_):
                v = y[p, o]
                y[p, o] = _sigmoid(v, z, z, k)  # rounded as the Sigmoid op's output
                y[p, o] = v * y[p, o]
    elif act == SIGMOID:  # a squeeze-and-excitation gate
        for p in range(p_):
            for o in range(o_):
                y[p, o] = _sigmoid(y[p, o], z, z, k)
    elif act == HARDSIGMOID:
        for p in range(p_):
            for o in range(o_):
                y[p, o] = _hardsigmoid(y[p, o], alpha, beta, k)


@njit(inline="always")
def _add_into(y, res):
    for p in range(y.shape[0]):
        for o in range(y.shape[1]):
            y[p, o] = y[p, o] + res[p, o]


@njit(cache=True, nogil=True, fastmath=False)
def conv_epilogue(y, bias, has_bias, res, has_res, act, alpha, beta, k):
    """``y[o, i] = act(y[o, i] + bias[o] + res[o, i])`` in place on a ``(O, L)`` block.

    ``bias`` is ``(O,)`` (read when ``has_bias``), ``res`` a block like ``y`` (read when
    ``has_res``), ``act`` one of the codes above, ``alpha``/``beta`` the HardSigmoid
    constants of HARDSWISH and HARDSIGMOID and ``k`` the formulas' constants, all in ``y``'s dtype."""
    block_epilogue(y, bias, has_bias, True, res, has_res, act, alpha, beta, k)


@njit(cache=True, nogil=True, fastmath=False)
def rows_epilogue(y, bias, has_bias, res, has_res, act, alpha, beta, k):
    """:func:`conv_epilogue` on a channels-last ``(P, O)`` block (pixels x output
    channels): the same steps, with ``bias[o]`` added along each row."""
    block_epilogue(y, bias, has_bias, False, res, has_res, act, alpha, beta, k)


@njit(cache=True, nogil=True, fastmath=False)
def rows_range_epilogue(y2, res2, r0, r1, o0, o1, bias, has_bias, has_res, act, alpha, beta,
                        k):
    """:func:`rows_epilogue` on rows ``[r0, r1)`` and columns ``[o0, o1)`` of the
    channels-last ``(P, O)`` outputs ``y2`` and ``res2`` (C-contiguous), ``bias`` all ``O``
    of them: whole rows as one block, a range of columns row by row.

    Numba types a slice of both axes, ``y2[r0:r1, o0:o1]``, as strided both ways, and the
    epilogue's loops over it ran scalar: squeezenet1_1's stem on the channels-last tiles,
    961 x 64 with bias and ReLU, one thread (Intel Xeon, 2026-12-02), 57 us against 11
    for the same rows as a contiguous block. A row's range of columns is contiguous."""
    b = bias[o0:o1] if has_bias else bias
    if o0 == 0 and o1 == y2.shape[1]:
        rows_epilogue(y2[r0:r1], b, has_bias, res2[r0:r1], has_res, act, alpha, beta, k)
        return
    for r in range(r0, r1):
        rows_epilogue(y2[r, o0:o1].reshape(1, o1 - o0), b, has_bias,
                      res2[r, o0:o1].reshape(1, o1 - o0), has_res, act, alpha, beta, k)
