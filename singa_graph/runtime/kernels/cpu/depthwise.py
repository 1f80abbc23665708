"""Direct kernels for depthwise and small-group convolutions (forward, dx, dW).

A grouped conv whose groups see few input channels each (depthwise: one) does little work
per group, so im2col + one small GEMM per group (conv.py) spends its time copying and in
GEMM call overhead. These kernels compute such convs directly on NCHW planes, row by row
(depthwise_loops.py, depthwise_dots.py), for any kernel size, stride, padding and dilation:

* forward: each output plane is the sum of its group's input planes correlated with their
  kernels (bias and fused ReLU applied on the way);
* input gradient, stride 1: the same correlation, of ``dy`` with the kernels flipped and
  padded by ``dilation*(k-1) - pad``; strided: tap-by-tap adds into the input plane;
* weight gradient: per output channel and sample, one dot product per tap between ``dy``'s
  plane and the input's phase planes (the forward's geometry).

Each output plane is written by one thread in a fixed order, so the results do not depend
on the thread count. :func:`direct` says which convs take this path; :func:`dispatch` wraps
conv.py's (workspace, factory) pairs so that they do.
"""
import numpy as np

from ....ops import formulas
from ....ops._util import tiled
from ....runtime import threads
from ...registry import carve, carved_bytes
from . import depthwise_channels_last as last
from . import depthwise_dots
from . import depthwise_loops as loops
from .epilogue import NONE, RELU, act_args, act_code
from .loops import bound, flat_view, pick

# Input channels per group up to which convs run on the direct kernels. Only depthwise
# (1) has been measured against im2col + GEMM per group so far; the kernels are correct
# for any width (tests/ops/test_depthwise.py runs them at 2 and 8).
MAX_GROUP_WIDTH = 1


def direct(op, w_shape) -> bool:
    """Whether the conv ``op`` with weight shape ``w_shape`` runs on the direct kernels
    (grouped, narrow groups, the same stride in both directions)."""
    return (op.groups > 1 and len(w_shape) == 4 and w_shape[1] <= MAX_GROUP_WIDTH
            and op.stride[0] == op.stride[1])


def _geo(op, w_shape):
    (s, _), (pt, pl, _, _), (dh, dw) = op.stride, op.padding, op.dilation
    return (w_shape[2], w_shape[3], s, pt, pl, dh, dw)


def _parts(planes):
    return max(1, min(threads.num_threads(), planes))


def _widths(w_shape, groups):
    """``(cg, og)``: input and output channels per group."""
    return w_shape[1], w_shape[0] // groups


def _correlate_args(src, w, dst, transposed, plan, cg, og, bias, has_bias, relu, scratch,
                    epilogue=None):
    """loops.correlate's arguments; ``epilogue`` is ``(res, has_res, act, alpha, beta, k)``
    (None: none), ``res`` shaped like ``dst``."""
    d = plan[1]
    dst2 = dst.reshape(d[0] * d[4], d[5] * d[6])  # (N*C_dst, H_dst*W_dst)
    if epilogue is None:
        zero = dst.dtype.type(0)
        epilogue = (dst2, False, NONE, zero, zero, formulas.constants(dst.dtype))
    res, *rest = epilogue
    return (src, w, dst, transposed, plan[0], plan[1], cg, og, bias, has_bias, relu, scratch,
            plan[2], dst2, res.reshape(dst2.shape), *rest)


def _dims(src, dst):
    """``(N, C_src, H_src, W_src, C_dst, H_dst, W_dst)``."""
    return tuple(int(v) for v in (*src.shape, *dst.shape[1:]))


def _plan(op, kind, dy_shape, w_shape, x_shape):
    """``(geo, dims, parts, per-part workspace elements)`` of one conv kernel; ``kind`` is
    "fwd", "dx" (stride 1: a transposed correlation), "dx_strided" or "dw"."""
    kh, kw, s, pt, pl, dh, dw = _geo(op, w_shape)
    cg = w_shape[1]
    n, ho, wo = dy_shape[0], dy_shape[2], dy_shape[3]
    if kind == "dx":
        geo = (kh, kw, 1, dh * (kh - 1) - pt, dw * (kw - 1) - pl, dh, dw)
        dims = (n, dy_shape[1], ho, wo, x_shape[1], x_shape[2], x_shape[3])
        hp, wp, _ = loops.pitch(kh, kw, 1, dh, dw, x_shape[2], x_shape[3])
        ln = 0  # loops.correlate writes its outputs in place
    else:
        geo = (kh, kw, s, pt, pl, dh, dw)
        dims = (n, x_shape[1], x_shape[2], x_shape[3], dy_shape[1], ho, wo)
        if kind in ("fwd", "dw"):  # the padded plane split into its s*s phases
            hq, wq, ln = loops.phases(kh, kw, s, dh, dw, ho, wo)
            hp, wp = s * hq, s * wq
            ln = ln if kind == "dw" else 0  # the forward writes its outputs in place
        else:
            hp, wp, ln = loops.pitch(kh, kw, s, dh, dw, ho, wo)
    planes = {"fwd": n * dy_shape[1], "dx": n * x_shape[1], "dx_strided": n * x_shape[1],
              "dw": w_shape[0]}[kind]
    return geo, tuple(int(v) for v in dims), _parts(planes), int(hp * wp + ln)


def _spec(plan, dtype):
    _, _, parts, per = plan
    return (parts, per), np.dtype(dtype)


def _dx_kind(op):
    return "dx" if op.stride == (1, 1) else "dx_strided"


#: output planes up to which depthwise forwards run with the channels innermost
#: (depthwise_channels_last.py), at stride 1 and at larger strides. Measured on
#: mobilenet_v2's shapes at batch 2 (one thread, 2026-11-26), against the plane-by-plane
#: loops and the channel-blocked layout (16 channels a block) that it replaced:
#: 960 channels at 2x2 20 us (75, 55), 576 at 4x4 30 (75, 55), 384 at 4x4 18 (51, 38),
#: 192 at 8x8 33 (38, 55), 144 at 16x16 to 8x8 stride 2 50 (85, 60); at 16x16 stride 1
#: the planes win (66 against 120), their rows being long enough to vectorise.
LAST_PLANE, LAST_PLANE_STRIDED = 64, 64
#: input planes up to which strided depthwise input gradients run channels innermost
LAST_PLANE_STRIDED_DX = 1024


def _runs_last(op, w_shape, dtype):
    """Whether a conv may run channels-innermost: depthwise, float32 (float64 convs run
    plane by plane, :func:`~singa_graph.ops._util.tiled`)."""
    return w_shape[1] == 1 and w_shape[0] == op.groups and tiled(dtype)


def _is_last(op, w_shape, y):
    """Whether the depthwise forward into ``y`` runs channels-innermost."""
    if not _runs_last(op, w_shape, y.dtype):
        return False
    plane = y.shape[2] * y.shape[3]
    return plane <= (LAST_PLANE if op.stride[0] == 1 else LAST_PLANE_STRIDED)


def _dx_is_last(op, w_shape, dx):
    """Whether a depthwise input gradient runs channels-innermost: at stride 1 as the
    forward of ``dy`` with the kernels flipped, strided as the forward's adjoint (measured
    at batch 2, one thread: 960 channels at 2x2 0.41 ms plane by plane against 0.02; 5x5
    kernels on 672 at 4x4 0.14 against 0.03)."""
    return (_runs_last(op, w_shape, dx.dtype)
            and dx.shape[2] * dx.shape[3] <= (LAST_PLANE if op.stride == (1, 1)
                                              else LAST_PLANE_STRIDED_DX))


def _last_plan(ins, outs):
    """``(specs, parts, per_sample)`` of the channels-innermost forward (of ``dy`` into
    ``dx`` for an input gradient): its workspace is the transposed weights and a scratch
    row per part."""
    x, w, y = ins[0].shape, ins[1].shape, outs[0].shape
    parts = _parts(x[0] * x[1])
    if last.split_by_channels(x[1], parts):
        per_sample = parts
    else:
        per_sample = last.units_of(x[0], x[1], parts)
        parts = _parts(x[0] * per_sample)
    per = last.forward_scratch(x[1], x[2], x[3], y[2], y[3], per_sample)
    dt = np.dtype(outs[0].dtype)
    return (((w[2] * w[3] * x[1],), dt), ((parts, per), dt)), parts, per_sample


def _conv_ws(op, ins, outs):
    if _is_last(op, ins[1].shape, outs[0]):
        return carved_bytes(*_last_plan(ins, outs)[0])
    return carved_bytes(_spec(_plan(op, "fwd", outs[0].shape, ins[1].shape, ins[0].shape),
                              outs[0].dtype))


def conv2d(op, ins, outs, ws):
    x, w = ins[0], ins[1]
    (y,) = outs
    has_res = bool(getattr(op, "residual", False))
    has_bias = len(ins) - has_res == 3
    bias = ins[2] if has_bias else flat_view(w)[:0]
    act = act_code(op)
    # a ReLU with nothing before it is applied as the planes are stored; with a residual
    # it must follow the add, in the epilogue
    relu = act == RELU and not has_res
    if relu:
        act = NONE
    cg, og = _widths(w.shape, op.groups)
    plan = _plan(op, "fwd", y.shape, w.shape, x.shape)
    if _is_last(op, w.shape, y):
        specs, parts, per_sample = _last_plan(ins, outs)
        wt, scratch = carve(ws, *specs)
        y3 = y.reshape(y.shape[0], y.shape[1], -1)
        res3 = ins[-1].reshape(y3.shape) if has_res else y3
        alpha, beta, k = act_args(op, y.dtype)
        args = (flat_view(x), flat_view(w), y3, bias, has_bias, relu, plan[0], plan[1],
                res3, has_res, act, alpha, beta, k, wt, scratch, parts, per_sample, False,
                False)
        return bound(pick(last.FORWARD, y.size * w.shape[2] * w.shape[3]), *args)
    (scratch,) = carve(ws, _spec(plan, y.dtype))
    # the inference passes' epilogue (residual add, activation; the bias is already in) runs
    # in each thread's part once its planes are done: run after the whole conv on the
    # calling thread, it took 14-170 us of 40-450 (mobilenet_v2's shapes, 2026-11-27)
    epilogue = (ins[-1] if has_res else y, has_res, act, *act_args(op, y.dtype))
    args = _correlate_args(flat_view(x), flat_view(w), flat_view(y), False, plan, cg, og, bias,
                           has_bias, relu, scratch, epilogue)
    return bound(loops.correlate, *args)


def _grad_input_ws(op, ins, outs):
    if _dx_is_last(op, ins[1].shape, outs[0]):
        return carved_bytes(*_last_plan(ins, outs)[0])
    plan = _plan(op, _dx_kind(op), ins[0].shape, ins[1].shape, outs[0].shape)
    return carved_bytes(_spec(plan, outs[0].dtype))


def conv2d_grad_input(op, ins, outs, ws):
    dy, w = ins
    (dx,) = outs
    cg, og = _widths(w.shape, op.groups)
    kind = _dx_kind(op)
    plan = _plan(op, kind, dy.shape, w.shape, dx.shape)
    if _dx_is_last(op, w.shape, dx):
        specs, parts, per_sample = _last_plan(ins, outs)
        wt, scratch = carve(ws, *specs)
        dx3 = dx.reshape(dx.shape[0], dx.shape[1], -1)
        alpha, beta, k = act_args(op, dx.dtype)
        if kind == "dx":  # the forward's geometry from dy into dx, kernels flipped
            geo, dims, flip, adjoint = plan[0], plan[1], True, False
        else:  # the adjoint of the forward's own geometry
            fwd = _plan(op, "fwd", dy.shape, w.shape, dx.shape)
            geo, dims, flip, adjoint = fwd[0], fwd[1], False, True
        args = (flat_view(dy), flat_view(w), dx3, flat_view(w)[:0], False, False, geo, dims,
                dx3, False, NONE, alpha, beta, k, wt, scratch, parts, per_sample, flip,
                adjoint)
        return bound(pick(last.FORWARD, dx.size * w.shape[2] * w.shape[3]), *args)
    (scratch,) = carve(ws, _spec(plan, dx.dtype))
    if kind == "dx":
        # dx[iy, ix] = sum_{i,j} w[i, j] dy[iy + pt - i*dh, ix + pl - j*dw]: a correlation
        # of dy with the flipped kernel, padded by dilation*(k-1) - pad
        args = _correlate_args(flat_view(dy), flat_view(w), flat_view(dx), True, plan, cg, og,
                               flat_view(w)[:0], False, False, scratch)
        return bound(loops.correlate, *args)
    args = (flat_view(dy), flat_view(w), flat_view(dx), plan[0], plan[1], cg, og, scratch,
            plan[2])
    return bound(loops.grad_input_strided, *args)


#: output planes up to which depthwise weight gradients run channels innermost. Measured at
#: batch 8, two threads (2026-11-27), channels innermost against the planes' dot products:
#: 16x16 outputs go to the planes (96 channels 32x32 stride 2 391 -> 268 us, 144 at 16x16
#: 385 -> 238), 8x8 and smaller stay (144 at 16x16 stride 2 147 against 227, 384 at 4x4 42
#: against 372).
LAST_PLANE_DW = 64


def _dw_last_plan(op, ins, outs):
    """``(spec, parts, units)`` of the channels-innermost weight gradient, or None."""
    dy, x, w = ins[0].shape, ins[1].shape, outs[0].shape
    if not _runs_last(op, w, outs[0].dtype) or dy[2] * dy[3] > LAST_PLANE_DW:
        return None
    units = last.units_of(1, x[1], _parts(x[1]))
    parts = _parts(units)
    per = last.scratch_elements(x[1], w[2], w[3], x[2], x[3], dy[2], dy[3], units)
    return ((parts, per), np.dtype(outs[0].dtype)), parts, units


def _grad_weight_ws(op, ins, outs):
    chosen = _dw_last_plan(op, ins, outs)
    if chosen is not None:
        return carved_bytes(chosen[0])
    plan = _plan(op, "dw", ins[0].shape, outs[0].shape, ins[1].shape)
    return carved_bytes(_spec(plan, outs[0].dtype))


def conv2d_grad_weight(op, ins, outs, ws):
    dy, x = ins
    (dw,) = outs
    chosen = _dw_last_plan(op, ins, outs)
    if chosen is not None:
        spec, parts, units = chosen
        (scratch,) = carve(ws, spec)
        geo, dims = _plan(op, "fwd", dy.shape, dw.shape, x.shape)[:2]
        args = (flat_view(dy), flat_view(x), flat_view(dw), geo, dims, scratch, parts, units)
        return bound(last.grad_weight, *args)
    cg, og = _widths(dw.shape, op.groups)
    plan = _plan(op, "dw", dy.shape, dw.shape, x.shape)
    (scratch,) = carve(ws, _spec(plan, dw.dtype))
    args = (flat_view(dy), flat_view(x), flat_view(dw), plan[0], plan[1], cg, og, scratch,
            plan[2])
    return bound(depthwise_dots.grad_weight, *args)


def _weight_shape(name, ins, outs):
    return tuple(outs[0].shape) if name == "Conv2dGradWeight" else tuple(ins[1].shape)


_DIRECT = {"Conv2d": (_conv_ws, conv2d), "Conv2dGradInput": (_grad_input_ws, conv2d_grad_input),
           "Conv2dGradWeight": (_grad_weight_ws, conv2d_grad_weight)}


def dispatch(name, workspace, factory):
    """``(workspace, factory)`` of op ``name`` that run the direct kernels on the convs
    :func:`direct` accepts and ``workspace``/``factory`` (im2col + GEMM) on the others."""
    d_ws, d_factory = _DIRECT[name]

    def ws_fn(op, ins, outs):
        if not direct(op, _weight_shape(name, ins, outs)) or len(ins[0].shape) != 4:
            return workspace(op, ins, outs)
        return d_ws(op, ins, outs)

    def make(op, ins, outs, ws):
        if not direct(op, _weight_shape(name, ins, outs)) or len(ins[0].shape) != 4:
            return factory(op, ins, outs, ws)
        return d_factory(op, ins, outs, ws)

    return ws_fn, make
