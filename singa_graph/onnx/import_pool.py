"""ONNX -> singa_graph: pooling the 2-d pooling ops do not cover (3-d and dilated
MaxPool/AveragePool, integer MaxPool) and LpPool, as the N-d pooling op; Col2Im; MaxUnpool
(a ScatterND); CausalConvWithState (Concat, a depthwise convolution, SiLU, Slice)."""
from __future__ import annotations

import numpy as np

from .. import ops
from .registry import importer


def pool_nd(n, kind):
    """MaxPool/AveragePool/LpPool of node ``n`` as :class:`singa_graph.ops.PoolNd`."""
    from .import_nn import _auto_pads

    x = n.t(0)
    kernel = list(n.attr("kernel_shape"))
    k = len(kernel)
    strides = list(n.attr("strides", [1] * k))
    dilations = list(n.attr("dilations", [1] * k))
    pads = _auto_pads(n, x.shape[2:], kernel, strides, dilations)
    out = ops.pool_nd(x, kind, kernel, strides, dilations, pads,
                      bool(n.attr("ceil_mode", 0)), bool(n.attr("count_include_pad", 0)),
                      n.attr("p", 2), kind == "max" and n.n_outputs > 1,
                      n.attr("storage_order", 0))
    return list(out) if isinstance(out, tuple) else out


@importer("LpPool")
def lp_pool(n):
    return pool_nd(n, "lp")


@importer("GlobalLpPool")
def global_lp_pool(n):
    x = n.t(0)
    p = float(n.attr("p", 2))
    return ops.PoolNd("lp", x.shape[2:], p=p)(x)


@importer("Col2Im")
def col2im(n):
    image = [int(v) for v in np.asarray(n.const(1)).ravel()]
    block = [int(v) for v in np.asarray(n.const(2)).ravel()]
    return ops.Col2Im(image, block, n.attr("strides"), n.attr("dilations"),
                      n.attr("pads"))(n.t(0))


@importer("MaxUnpool")
def max_unpool(n):
    """Each value written at its flat index into zeros of the output shape: a ScatterND of
    the flattened tensors."""
    from .program import constant

    x, idx = n.t(0), n.t(1)
    kernel = list(n.attr("kernel_shape"))
    k = len(kernel)
    strides = list(n.attr("strides", [1] * k))
    pads = list(n.attr("pads", [0] * 2 * k))
    # the indices address the shape the pooling came from; output_shape pads its end
    shape = x.shape[:2] + tuple((s - 1) * st - pads[i] - pads[k + i] + kk for i, (s, st, kk)
                                in enumerate(zip(x.shape[2:], strides, kernel)))
    zeros = constant(np.zeros(int(np.prod(shape)), x.dtype))
    flat = ops.scatter_nd(zeros, ops.reshape(idx, (idx.size, 1)), ops.reshape(x, (x.size,)))
    y = ops.reshape(flat, shape)
    if n.has(2):
        want = tuple(int(v) for v in np.asarray(n.const(2)).ravel())
        if want != shape:
            y = ops.pad(y, "constant", [0] * len(want) + [w - s for w, s in zip(want, shape)],
                        0)
    return y


@importer("CausalConvWithState")
def causal_conv_with_state(n):
    """A depthwise causal 1-d convolution over the past state and the input (Concat and
    the 2-d convolution with one row), optionally followed by SiLU; the new state is the
    last ``k - 1`` positions."""
    from .program import constant

    x, w = n.t(0), n.t(1)  # (B, C, L), (C, 1, k)
    b, c, length = x.shape
    k = w.shape[2]
    if k > 1:
        past = n.t(3) if n.has(3) else constant(np.zeros((b, c, k - 1), x.dtype))
        padded = ops.cat([past, x], 2)
    else:
        padded = x
    total = length + k - 1
    y = ops.conv2d(ops.reshape(padded, (b, c, 1, total)), ops.reshape(w, (c, 1, 1, k)),
                   n.t(2) if n.has(2) else None, 1, 0, 1, c)
    y = ops.reshape(y, (b, c, length))
    if n.attr("activation", "none") in ("silu", "swish"):
        y = ops.mul(y, ops.sigmoid(y))
    state = (ops.slice(padded, [total - (k - 1)], [total], [2], [1]) if k > 1
             else np.zeros((b, c, 0), x.dtype))
    return [y, state]
