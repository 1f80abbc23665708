"""Convolution kernels: batch-parallel im2col + GEMM, every byte of scratch planned.

Each kernel splits the batch into ``parts`` (the thread policy's thread count, see
:mod:`singa_graph.runtime.threads`) and runs one Numba driver (conv_loops.py) whose
``prange`` gives each part a thread of Numba's pool, its own samples and its own slice of
workspace. A part takes its samples one at a time: im2col into its columns (one sample's,
``C*kh*kw x Ho*Wo``: a few hundred KiB at most for these models, so the GEMM reads them
from L2), then one single-threaded BLAS GEMM per group, no operand copied. 1x1 stride-1
convs are plain GEMMs on the input itself.

The scratch of every kernel (columns, flipped weights, partial weight gradients) is declared
through ``workspace=`` and carved out of the planned workspace, so nothing is allocated when
a plan is built or run.
"""
import types

import numpy as np

from ....ops._util import tiled
from ....runtime import threads
from ...registry import carve, carved_bytes, kernel
from . import blas, conv_direct, conv_direct_grad_weight, conv_loops as loops, conv_planes, \
    depthwise, pointwise, winograd, winograd_grad_weight
from .epilogue import epilogue_args
from .loops import bound


def _view(a, shape):
    """A reshaped *view*: a copy made here would leave the step reading stale data."""
    v = a.reshape(shape)
    if v.size and not np.may_share_memory(v, a):
        raise ValueError(f"kernel needs a reshapeable (contiguous) array, got strides "
                         f"{a.strides} for shape {a.shape}")
    return v


class _Geom:
    """Shapes of one conv node, and how its batch is split into parts."""

    def __init__(self, op, x_shape, w_shape, y_shape, dtype):
        self.n, self.c, self.h, self.w = x_shape
        self.o, self.cg, self.kh, self.kw = w_shape
        self.ho, self.wo = y_shape[2], y_shape[3]
        self.g = op.groups
        self.og = self.o // self.g
        self.k = self.cg * self.kh * self.kw
        self.l = self.ho * self.wo
        self.dtype = np.dtype(dtype)
        (sh, sw), (pt, pl, _, _), (dh, dw) = op.stride, op.padding, op.dilation
        self.geo = (self.kh, self.kw, sh, sw, pt, pl, dh, dw)
        self.pointwise = (self.kh == self.kw == 1 and op.stride == (1, 1)
                          and not any(op.padding))
        self.parts = max(1, min(threads.num_threads(), self.n))

    def cols_spec(self):
        """The parts' im2col scratch: one sample's columns each (none when pointwise)."""
        rows = 0 if self.pointwise else self.c * self.kh * self.kw
        return (self.parts, rows, 0 if self.pointwise else self.l), self.dtype


def _geom(op, x, w, y):
    return _Geom(op, x.shape, w.shape, y.shape, y.dtype)


def _carve(ws, like, *specs):
    """:func:`carve`; with no workspace (``ws`` None: every spec is empty), empty views of
    ``like``, so that the drivers always get arrays of the right rank and dtype."""
    if ws is None:
        return [like.reshape(-1)[:0].reshape(s) for s, _ in specs]
    return carve(ws, *specs)


# ---------------------------------------------------------------------------- forward
def _conv_ws(op, ins, outs):
    if conv_planes.chosen(op, ins[0].shape, ins[1].shape, outs[0].shape, outs[0].dtype):
        return conv_planes.workspace(op, ins, outs)
    if conv_direct.chosen(op, ins[0].shape, ins[1].shape, outs[0].shape, outs[0].dtype):
        return conv_direct.plain_workspace(op, ins, outs)
    if winograd.chosen(op, ins[0].shape, ins[1].shape, outs[0].dtype):
        return winograd.forward_workspace(op, ins, outs)
    gm = _geom(op, ins[0], ins[1], outs[0])
    if pointwise.chosen(gm):
        return carved_bytes(pointwise.spec(gm))
    stacked = _forward_stacked_specs(gm)
    if stacked is not None:
        return carved_bytes(*stacked)
    return carved_bytes(gm.cols_spec())


def conv2d(op, ins, outs, ws):
    x, w = ins[0], ins[1]
    if conv_planes.chosen(op, x.shape, w.shape, outs[0].shape, outs[0].dtype):
        return conv_planes.forward(op, ins, outs, ws)
    if conv_direct.chosen(op, x.shape, w.shape, outs[0].shape, outs[0].dtype):
        return conv_direct.plain_forward(op, ins, outs, ws)
    if winograd.chosen(op, x.shape, w.shape, outs[0].dtype):
        return winograd.forward(op, ins, outs, ws)
    (y,) = outs
    gm = _geom(op, x, w, y)
    w3 = _view(w, (gm.g, gm.og, gm.k))
    y3 = _view(y, (gm.n, gm.o, gm.l))
    x3 = _view(x, (gm.n, gm.c, gm.h * gm.w))
    bias, has_bias, res3, has_res, act, alpha, beta, k = epilogue_args(op, ins, y3)
    if pointwise.chosen(gm):
        (xt,) = carve(ws, pointwise.spec(gm))
        args = (x, x3, w3.reshape(-1), xt.reshape(-1), y3, bias, has_bias, res3, has_res,
                act, alpha, beta, k, gm.geo, gm.wo, gm.pointwise,
                pointwise.parts_of(gm, threads.num_threads()))
        return bound(pointwise.forward, *args)
    # (a pointwise conv multiplies the input itself, sample by sample: copying it side by
    # side for one GEMM measured slower, 0.13 -> 0.24 ms CPU for 192 -> 1152 channels at 2x2)
    stacked = _forward_stacked_specs(gm)
    if stacked is not None:
        cols, ys = carve(ws, *stacked)
        parts = max(1, min(threads.num_threads(), gm.og))
        args = (x, x3, w3, y3, cols, ys, bias, gm.geo, gm.ho, gm.wo, has_bias, res3, has_res,
                act, alpha, beta, k, gm.pointwise, parts, blas.HANDLE)
        return bound(loops.forward_stacked, *args)
    (cols,) = _carve(ws, y, gm.cols_spec())
    args = (x, x3, w3, y3, cols, bias, gm.geo, gm.ho, gm.wo, has_bias, res3, has_res,
            act, alpha, beta, k, gm.pointwise, gm.parts, blas.HANDLE)
    return bound(loops.forward, *args)


# ---------------------------------------------------------------------------- dx
def _flip_plan(op, w, dy):
    """For stride 1, the input gradient is a forward conv of ``dy`` with the kernel flipped
    and in/out channels swapped per group, padded by ``dilation*(k-1) - pad``: im2col + GEMM,
    no scatter-add. Its im2col runs over the ``og`` channels of ``dy`` where col2im runs
    over the ``cg`` of ``dx``, so it is used when ``og <= cg``, and where the columns
    outnumber twice the output channels: the flipped copy of the weights costs a pass over
    them per step, which col2im's scatter-adds over few columns undercut (ResNet-18's 3x3
    convs at batch 2: 512 channels at 2x2 2.6-2.7 ms flipped against 1.1-1.4, 256 at 4x4
    1.0 against 0.45-0.5, 128 at 8x8 0.36-0.52 against 0.28-0.38; 64 at 16x16 keeps the
    flip). Returns ``(forward op, flipped weight shape)`` or None."""
    o, cg, kh, kw = w.shape
    if dy.shape[0] * dy.shape[2] * dy.shape[3] <= 2 * o:
        return None
    (dh, dw), (pt, pl, pb, pr) = op.dilation, op.padding
    pads = (dh * (kh - 1) - pt, dw * (kw - 1) - pl, dh * (kh - 1) - pb, dw * (kw - 1) - pr)
    g = op.groups
    og = o // g
    if op.stride != (1, 1) or min(pads) < 0 or og > cg or (kh == kw == 1 and not any(pads)):
        return None
    fwd = types.SimpleNamespace(type="Conv2d", stride=(1, 1), padding=pads,
                                dilation=op.dilation, groups=g, algo="direct")
    return fwd, (g * cg, og, kh, kw)


def _grad_input_flip(op, w, dy, dx):
    """``(winograd, flip)``: whether Winograd runs the input gradient, else the
    :func:`_flip_plan` that does (None: col2im). A stride-1 one whose flipped forward the
    output-row tiles take (conv_planes.whole_rows: few channels, whole pairs of vectors a
    row) leaves that forward to choose its kernel (those tiles) ahead of Winograd; any other
    flipped forward is im2col's."""
    flip = _flip_plan(op, w, dy)
    if (flip is not None and getattr(op, "algo", "auto") == "auto" and tiled(dx.dtype)
            and conv_planes.whole_rows(*flip, dx.shape, dx.dtype)):
        flip[0].algo = "auto"
        return False, flip
    if winograd.chosen(op, dx.shape, w.shape, dx.dtype):
        return True, None
    return False, flip


def _grad_input_ws(op, ins, outs):
    dy, w = ins
    (dx,) = outs
    use_winograd, flip = _grad_input_flip(op, w, dy, dx)
    if use_winograd:
        return winograd.grad_input_workspace(op, ins, outs)
    if flip is not None:
        fwd, wt_shape = flip
        wt = types.SimpleNamespace(shape=wt_shape, dtype=dx.dtype)
        return carved_bytes((wt_shape, dx.dtype)) + _conv_ws(fwd, [dy, wt], [dx])
    return carved_bytes(_Geom(op, dx.shape, w.shape, dy.shape, dx.dtype).cols_spec())


def conv2d_grad_input(op, ins, outs, ws):
    dy, w = ins
    (dx,) = outs
    use_winograd, flip = _grad_input_flip(op, w, dy, dx)
    if use_winograd:
        return winograd.grad_input(op, ins, outs, ws)
    if flip is not None:
        fwd_op, wt_shape = flip
        (wt,) = carve(ws, (wt_shape, dx.dtype))
        rest = ws[carved_bytes((wt_shape, dx.dtype)):]
        need = _conv_ws(fwd_op, [dy, wt], [dx])
        fwd = conv2d(fwd_op, [dy, wt], [dx], rest[:need] if need else None)
        g, cg, og, kh, kw = op.groups, w.shape[1], wt_shape[1], w.shape[2], w.shape[3]
        wt5 = wt.reshape(g, cg, og, kh, kw)
        flipped = w.reshape(g, og, cg, kh, kw)[:, :, :, ::-1, ::-1].transpose(0, 2, 1, 3, 4)

        def step():
            np.copyto(wt5, flipped)  # the weights change every step
            fwd()
        return step
    gm = _Geom(op, dx.shape, w.shape, dy.shape, dx.dtype)
    w3 = _view(w, (gm.g, gm.og, gm.k))
    dy3 = _view(dy, (gm.n, gm.o, gm.l))
    dx3 = _view(dx, (gm.n, gm.c, gm.h * gm.w))
    (cols,) = _carve(ws, dx, gm.cols_spec())
    args = (dy3, w3, dx, dx3, cols, gm.geo, gm.ho, gm.wo, gm.pointwise, gm.parts, blas.HANDLE)
    return bound(loops.grad_input, *args)


# ---------------------------------------------------------------------------- dW
def _grad_weight_specs(gm):
    """The parts' im2col scratch and their partial ``dW^T``, ``(parts, G, K, Og)``."""
    return gm.cols_spec(), ((gm.parts, gm.g, gm.k, gm.og), gm.dtype)


#: batch x output plane up to which forward convs and weight gradients lay the batch side
#: by side in one product (conv_loops.forward_stacked, grad_weight_stacked): ResNet-18's
#: 512-channel 3x3 convs at 2x2, batch 2, took 25-30 ms per weight gradient with a partial
#: dW per part, and its forward packed the 9.4 MB of weights once per sample
STACK_COLUMNS = 64
#: ... and the forward only for weights of at least this many bytes: packing them once per
#: sample costs less than the stacked forward's copy-out below that (batch 2, two threads:
#: densenet's 32x1152 at 4x4 40 against 52 us per sample vs stacked, its 2x2 28 against 38;
#: 320x1440 at 2x2 141 against 120; ResNet's 512x4608 at 2x2 658 against 514)
STACK_WEIGHT_BYTES = 3 << 19


def _stacked_specs(gm):
    """The side-by-side columns and output gradients of grad_weight_stacked, or None."""
    if gm.n * gm.l > STACK_COLUMNS:
        return None
    return ((gm.c * gm.kh * gm.kw, gm.n * gm.l), gm.dtype), ((gm.o, gm.n * gm.l), gm.dtype)


def _forward_stacked_specs(gm):
    """:func:`_stacked_specs` where the forward lays the batch side by side, or None."""
    if gm.pointwise or gm.o * gm.k * gm.dtype.itemsize < STACK_WEIGHT_BYTES:
        return None
    return _stacked_specs(gm)


def _grad_weight_ws(op, ins, outs):
    dy, x = ins
    (dw,) = outs
    if winograd.chosen(op, x.shape, dw.shape, dw.dtype):
        return winograd_grad_weight.workspace(op, ins, outs)
    gm = _Geom(op, x.shape, dw.shape, dy.shape, dw.dtype)
    stacked = _stacked_specs(gm)
    if stacked is not None:
        return carved_bytes(*stacked)
    if conv_direct_grad_weight.chosen(op, x.shape, dw.shape, dw.dtype):
        return conv_direct_grad_weight.workspace(op, ins, outs)
    return carved_bytes(*_grad_weight_specs(gm))


def conv2d_grad_weight(op, ins, outs, ws):
    dy, x = ins
    (dw,) = outs
    if winograd.chosen(op, x.shape, dw.shape, dw.dtype):
        return winograd_grad_weight.grad_weight_step(op, ins, outs, ws)
    gm = _Geom(op, x.shape, dw.shape, dy.shape, dw.dtype)
    dw3 = _view(dw, (gm.g, gm.og, gm.k))
    dy3 = _view(dy, (gm.n, gm.o, gm.l))
    x3 = _view(x, (gm.n, gm.c, gm.h * gm.w))
    stacked = _stacked_specs(gm)
    if stacked is not None:
        cols, dys = carve(ws, *stacked)
        parts = max(1, min(threads.num_threads(), gm.og))
        args = (dy3, x, x3, dw3, cols, dys, gm.geo, gm.ho, gm.wo, gm.pointwise, parts,
                blas.HANDLE)
        return bound(loops.grad_weight_stacked, *args)
    if conv_direct_grad_weight.chosen(op, x.shape, dw.shape, dw.dtype):
        return conv_direct_grad_weight.grad_weight_step(op, ins, outs, ws)
    cols, acc = carve(ws, *_grad_weight_specs(gm))
    args = (dy3, x, x3, dw3, cols, acc, gm.geo, gm.ho, gm.wo, gm.pointwise, gm.parts,
            blas.HANDLE)
    return bound(loops.grad_weight, *args)


# ---------------------------------------------------------------------------- float16
def _float32(a):
    return types.SimpleNamespace(shape=tuple(a.shape), dtype=np.dtype(np.float32))


def _staged(ws_fn, factory):
    """``(workspace, factory)`` that also take float16: Numba cannot compute in float16, so
    the float32 kernel runs on float32 copies of the operands, kept in the workspace, and
    its result is rounded to float16."""

    def specs(ins, outs):
        return [(tuple(a.shape), np.float32) for a in (*ins, *outs)]

    def workspace(op, ins, outs):
        if outs[0].dtype != np.float16:
            return ws_fn(op, ins, outs)
        return carved_bytes(*specs(ins, outs)) + ws_fn(op, [_float32(a) for a in ins],
                                                      [_float32(a) for a in outs])

    def make(op, ins, outs, ws):
        if outs[0].dtype != np.float16:
            return factory(op, ins, outs, ws)
        arrays = carve(ws, *specs(ins, outs))
        ins32, outs32 = arrays[:len(ins)], arrays[len(ins):]
        need = ws_fn(op, ins32, outs32)
        rest = ws[carved_bytes(*specs(ins, outs)):]
        inner = factory(op, ins32, outs32, rest[:need] if need else None)

        def step():
            for a32, a in zip(ins32, ins):
                np.copyto(a32, a)
            inner()
            for a, a32 in zip(outs, outs32):
                np.copyto(a, a32, casting="same_kind")
        return step

    return workspace, make


for _name, _ws, _factory in (("Conv2d", _conv_ws, conv2d),
                             ("Conv2dGradInput", _grad_input_ws, conv2d_grad_input),
                             ("Conv2dGradWeight", _grad_weight_ws, conv2d_grad_weight)):
    _w, _f = _staged(*depthwise.dispatch(_name, _ws, _factory))
    kernel(_name, workspace=_w)(_f)
