"""singa_graph -> ONNX: one function per op type of ours, writing ONNX nodes at the export's
opset (17 or newer) through an :class:`~.exporter.ExportContext`."""
from __future__ import annotations

import numpy as np
from onnx import helper

from ..errors import UnsupportedOpError
from .registry import exporter

# ops that export as one ONNX node of the same inputs, outputs and no attributes
_SAME_NAME = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "Pow": "Pow",
              "Neg": "Neg", "Exp": "Exp", "Log": "Log", "Sqrt": "Sqrt", "Abs": "Abs",
              "Sign": "Sign", "ReLU": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh",
              "Identity": "Identity", "GlobalAveragePool": "GlobalAveragePool",
              # elementwise math of the op library (export_elementwise.py)
              "Sin": "Sin", "Cos": "Cos", "Tan": "Tan", "Asin": "Asin", "Acos": "Acos",
              "Atan": "Atan", "Sinh": "Sinh", "Cosh": "Cosh", "Asinh": "Asinh",
              "Acosh": "Acosh", "Atanh": "Atanh", "Erf": "Erf", "Ceil": "Ceil",
              "Floor": "Floor", "Round": "Round", "Reciprocal": "Reciprocal",
              "Softplus": "Softplus", "Softsign": "Softsign", "Max": "Max", "ElementwiseMean": "Mean",
              "Min": "Min",
              # data movement (export_layout.py)
              "Shape": "Shape", "NonZero": "NonZero"}


@exporter(*_SAME_NAME)
def same_name(ctx, node):
    ctx.emit(_SAME_NAME[node.type], node.inputs, node.outputs)


@exporter("PRelu")
def prelu(ctx, node):
    """ONNX's PRelu broadcasts only the slope: an ``x`` that SINGA's rule broadcasts against
    the slope is expanded first (by 1 on the axes it already has, so a dynamic batch stays)."""
    x, y = node.inputs[0], node.outputs[0]
    if x.shape != y.shape:
        pad = (1,) * (y.ndim - x.ndim) + tuple(x.shape)
        grow = [o if d != o else 1 for d, o in zip(pad, y.shape)]
        big = ctx.fresh(y)
        ctx.emit("Expand", [x, ctx.const(np.array(grow, np.int64))], [big])
        ctx.emit("PRelu", [big, node.inputs[1]], [y])
    else:
        ctx.emit("PRelu", node.inputs, node.outputs)


@exporter("LeakyReLU")
def leaky_relu(ctx, node):
    ctx.emit("LeakyRelu", node.inputs, node.outputs, alpha=node.op.alpha)


@exporter("Softmax", "LogSoftmax", "GatherElements", "ScatterElements")
def with_axis(ctx, node):
    ctx.emit(node.type, node.inputs, node.outputs, axis=node.op.axis)


@exporter("Conv2d")
def conv(ctx, node):
    op = node.op
    if op.residual or op.act not in ("", "relu"):
        raise UnsupportedOpError(f"{node.name}: a fused {op.label} is not exported; export "
                                 "the model's graph rather than an inference plan's")
    w = node.inputs[1]
    y = node.outputs[0]
    out = ctx.fresh(y) if op.relu else ctx.name(y)
    ctx.emit("Conv", node.inputs, [out], kernel_shape=list(w.shape[2:]),
             strides=list(op.stride), pads=list(op.padding), dilations=list(op.dilation),
             group=op.groups)
    if op.relu:
        ctx.emit("Relu", [out], [y])


@exporter("Conv2dGradInput")
def conv_transpose(ctx, node):
    """The gradient of a convolution with respect to its input is ONNX's ConvTranspose;
    output_padding gives back the rows and columns a strided convolution drops."""
    op = node.op
    w = node.inputs[1]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = op.stride, op.dilation, op.padding
    (h, wd), (kh, kw) = node.inputs[0].shape[2:], w.shape[2:]
    full = [sh * (h - 1) + (kh - 1) * dh + 1 - pt - pb,
            sw * (wd - 1) + (kw - 1) * dw + 1 - pl - pr]
    ctx.emit("ConvTranspose", node.inputs, node.outputs, kernel_shape=[kh, kw],
             strides=list(op.stride), pads=list(op.padding), dilations=list(op.dilation),
             group=op.groups, output_padding=[o - f for o, f in zip(op.x_shape[2:], full)])


def _ceil_pads(op, x_shape, y_shape):
    """``(ceil_mode, pads)`` for ONNX that pool as ``op`` does and that ONNX's own shape
    inference agrees with. It (onnx 1.23) lacks the rule, kept by onnxruntime and the op,
    that drops a ceil-mode window starting in the trailing padding; such a drop leaves floor
    mode's size. So: floor mode where no axis gains a window (the same windows, all inside
    the padding, so the same divisors too), else ceil mode, with the trailing padding of an
    axis that lost its window cut to where its last window ends (again the same windows)."""
    pads = list(op.padding)
    if not op.ceil_mode:
        return 0, pads
    gains, cut = False, {}
    for axis, (n, o) in enumerate(zip(x_shape[2:], y_shape[2:])):
        k, s, p0 = op.kernel[axis], op.stride[axis], pads[axis]
        span = n + p0 + pads[axis + 2] - k
        if o != span // s + 1:
            gains = True
        elif -(-span // s) + 1 != o:
            cut[axis + 2] = (o - 1) * s + k - n - p0
    if not gains:
        return 0, pads
    if any(p < 0 for p in cut.values()):  # its last window ends before the input does
        raise UnsupportedOpError(f"{op.type} with ceil_mode on {tuple(x_shape)}: ONNX's "
                                 "shape inference counts one window more than onnxruntime")
    for i, p in cut.items():
        pads[i] = p
    return 1, pads


@exporter("MaxPool2d", "AvgPool2d")
def pool(ctx, node):
    op = node.op
    ceil, pads = _ceil_pads(op, node.inputs[0].shape, node.outputs[0].shape)
    attrs = dict(kernel_shape=list(op.kernel), strides=list(op.stride), pads=pads)
    if ceil:
        attrs["ceil_mode"] = 1
    if node.type == "AvgPool2d":
        ctx.emit("AveragePool", node.inputs, node.outputs,
                 count_include_pad=int(op.count_include_pad), **attrs)
    else:
        ctx.emit("MaxPool", node.inputs, node.outputs, **attrs)


@exporter("BatchNorm2d")
def batch_norm(ctx, node):
    """The inference form: running statistics, one output (training outputs are dropped)."""
    op = node.op
    y = node.outputs[0]
    out = ctx.fresh(y) if op.relu else ctx.name(y)
    # ONNX's momentum weights the running value, ours the batch statistics
    ctx.emit("BatchNormalization", node.inputs, [out], epsilon=op.eps,
             momentum=1.0 - op.momentum)
    if op.relu:
        ctx.emit("Relu", [out], [y])


@exporter("Dropout")
def dropout(ctx, node):
    """Omitted: the inference graph passes the input through."""
    ctx.alias(node.outputs[0], node.inputs[0])


@exporter("MatMul")
def matmul(ctx, node):
    op = node.op
    a, b = node.inputs
    if a.ndim == 2 and b.ndim == 2:
        if op.trans_a or op.trans_b:
            ctx.emit("Gemm", [a, b], node.outputs, transA=int(op.trans_a),
                     transB=int(op.trans_b))
        else:
            ctx.emit("MatMul", [a, b], node.outputs)
        return
    ins = []
    for t, trans in ((a, op.trans_a), (b, op.trans_b)):
        if trans:
            perm = list(range(t.ndim - 2)) + [t.ndim - 1, t.ndim - 2]
            name = ctx.fresh(t)
            ctx.emit("Transpose", [t], [name], perm=perm)
            ins.append(name)
        else:
            ins.append(t)
    ctx.emit("MatMul", ins, node.outputs)


@exporter("Gemm")
def gemm(ctx, node):
    op = node.op
    ctx.emit("Gemm", node.inputs, node.outputs, alpha=op.alpha, beta=op.beta,
             transA=int(op.trans_a), transB=int(op.trans_b))


@exporter("AddBias")
def add_bias(ctx, node):
    x, b = node.inputs
    trailing = x.ndim - node.op.dim - 1
    if trailing:
        shape = ctx.const(np.array([b.shape[0]] + [1] * trailing, np.int64))
        bb = ctx.fresh(b)
        ctx.emit("Reshape", [b, shape], [bb])
        b = bb
    ctx.emit("Add", [x, b], node.outputs)


def shape_const(ctx, x, shape):
    """A Reshape target for ``x``; with a symbolic batch the batch entry becomes 0 (copy),
    and a leading axis that merges or splits the batch with the axes after it (``(N, s, e)
    <-> (N * s, e)``, as position-wise projections reshape) becomes -1."""
    shape = [int(s) for s in shape]
    if ctx.dynamic_batch and shape and x.shape:
        if shape[0] == x.shape[0] == ctx.batch:
            shape[0] = 0
        elif _merges_leading(tuple(x.shape), tuple(shape)):
            shape[0] = -1
    return ctx.const(np.array(shape, np.int64))


def _merges_leading(src, dst) -> bool:
    """Whether ``dst``'s first axis merges the first axes of ``src`` (or splits into them)
    and the axes after are the same: then only ``dst[0]`` grows with ``src``'s batch."""
    for j in range(2, len(src) + 1):
        if int(np.prod(src[:j])) == dst[0] and src[j:] == dst[1:]:
            return True
    for j in range(2, len(dst) + 1):
        if int(np.prod(dst[:j])) == src[0] and dst[j:] == src[1:]:
            return True
    return False


@exporter("Reshape")
def reshape(ctx, node):
    x = node.inputs[0]
    ctx.emit("Reshape", [x, shape_const(ctx, x, node.outputs[0].shape)], node.outputs)


@exporter("Flatten")
def flatten(ctx, node):
    ctx.emit("Flatten", node.inputs, node.outputs, axis=node.op.axis)


@exporter("Transpose")
def transpose(ctx, node):
    ctx.emit("Transpose", node.inputs, node.outputs, perm=list(node.op.perm))


@exporter("Concat")
def concat(ctx, node):
    ctx.emit("Concat", node.inputs, node.outputs, axis=node.op.axis)


@exporter("Split")
def split(ctx, node):
    sizes = ctx.const(np.array(node.op.parts, np.int64))
    ctx.emit("Split", [node.inputs[0], sizes], node.outputs, axis=node.op.axis)


@exporter("Cast")
def cast(ctx, node):
    extra = {}
    if not getattr(node.op, "saturate", True):  # ONNX's default is to saturate
        extra["saturate"] = 0
    if getattr(node.op, "round_mode", "up") != "up":
        extra["round_mode"] = node.op.round_mode
    ctx.emit("Cast", node.inputs, node.outputs,
             to=helper.np_dtype_to_tensor_dtype(np.dtype(node.op.dtype)), **extra)


@exporter("BroadcastTo")
def broadcast_to(ctx, node):
    x = node.inputs[0]
    ctx.emit("Expand", [x, shape_const(ctx, x, node.op.shape)], node.outputs)


def _axes(node):
    x = node.inputs[0]
    return list(range(x.ndim)) if node.op.axes is None else list(node.op.axes)


@exporter("Sum")
def reduce_sum(ctx, node):
    axes = ctx.const(np.array(_axes(node), np.int64))
    ctx.emit("ReduceSum", [node.inputs[0], axes], node.outputs,
             keepdims=int(node.op.keepdims))


@exporter("Mean")
def reduce_mean(ctx, node):
    if ctx.opset >= 18:
        axes = ctx.const(np.array(_axes(node), np.int64))
        ctx.emit("ReduceMean", [node.inputs[0], axes], node.outputs,
                 keepdims=int(node.op.keepdims))
    else:
        ctx.emit("ReduceMean", node.inputs, node.outputs, axes=_axes(node),
                 keepdims=int(node.op.keepdims))


@exporter("ArgMax")
def argmax(ctx, node):
    ctx.emit("ArgMax", node.inputs, node.outputs, axis=node.op.axis,
             keepdims=int(node.op.keepdims))


@exporter("LSTMCell")
def lstm_cell(ctx, node):
    """One LSTM step from its gate pre-activations (i, f, o, g), in elementwise ONNX ops;
    ONNX's LSTM op runs a whole sequence and takes the weights, not pre-activations."""
    pre, c = node.inputs
    h, c_new = node.outputs
    gates = [ctx.fresh(pre) for _ in range(4)]
    hidden = c.shape[1]
    ctx.emit("Split", [pre, ctx.const(np.array([hidden] * 4, np.int64))], gates, axis=1)
    i, f, o, g = (ctx.fresh(pre) for _ in range(4))
    for src, dst, fn in zip(gates, (i, f, o, g), ("Sigmoid",) * 3 + ("Tanh",)):
        ctx.emit(fn, [src], [dst])
    kept, new = ctx.fresh(c), ctx.fresh(c)
    ctx.emit("Mul", [f, c], [kept])
    ctx.emit("Mul", [i, g], [new])
    ctx.emit("Add", [kept, new], [c_new])
    squashed = ctx.fresh(c)
    ctx.emit("Tanh", [c_new], [squashed])
    ctx.emit("Mul", [o, squashed], [h])
