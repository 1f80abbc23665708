"""2-d pooling (NCHW): MaxPool2d, AvgPool2d, GlobalAveragePool and their gradient ops.

Output sizes use floor mode (ONNX ``ceil_mode=0``, SINGA) unless ``ceil_mode``: then a last,
partial window is kept where the floor would drop it, as long as it starts inside the input or
its leading padding (the rule of PyTorch, ONNX and onnxruntime; see :func:`pool_out_size`).
Every padding must be smaller than the kernel along its axis, so each window holds at least
one real cell: max pooling pads with -inf (a padded cell never wins) and the exclude-padding
average never divides by zero.

``count_include_pad`` defaults to False: ONNX AveragePool's default (``count_include_pad=0``)
and what SINGA's DNNL/cuDNN pooling does (``*_EXCLUDE_PADDING``); PyTorch's default is True.
With it, a window's divisor counts the cells it covers inside the explicitly padded input;
the part of a ceil-mode window hanging past the trailing padding is not counted (PyTorch and
onnxruntime divide so).
"""
from __future__ import annotations

from ..errors import ShapeError, UnsupportedOpError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float
from .conv import pads, pair

__all__ = ["MaxPool2d", "AvgPool2d", "GlobalAveragePool", "MaxPool2dGrad", "AvgPool2dGrad",
           "max_pool2d", "avg_pool2d", "global_average_pool"]


def pool_out_size(n, k, s, p0, p1, ceil_mode=False) -> int:
    """Number of windows of ``k`` cells at stride ``s`` over ``n`` cells padded by ``p0``
    before and ``p1`` after. Floor mode keeps only windows that fit; ``ceil_mode`` adds a
    last partial one unless it would start in the trailing padding (PyTorch's and ONNX's
    rule), so every window starts before ``n + p0`` and holds a real cell."""
    span = n + p0 + p1 - k
    if not ceil_mode:
        return span // s + 1
    out = -(-span // s) + 1
    return out - 1 if (out - 1) * s >= n + p0 else out


class _Pool(Operation):
    def __init__(self, kernel, stride=None, padding=0, *, ceil_mode=False):
        self.kernel = pair(kernel, "kernel")
        self.stride = self.kernel if stride is None else pair(stride, "stride")
        self.padding = pads(padding)  # ONNX order (top, left, bottom, right)
        self.ceil_mode = bool(ceil_mode)

    def output_shape(self, shape) -> tuple:
        if len(shape) != 4:
            raise ShapeError(f"pooling needs a 4-d NCHW input, got {shape}")
        (kh, kw), (sh, sw), (pt, pl, pb, pr) = self.kernel, self.stride, self.padding
        if max(pt, pb) >= kh or max(pl, pr) >= kw:
            raise ShapeError(f"padding {self.padding} must be smaller than kernel {self.kernel}")
        n, c, h, w = shape
        ho = pool_out_size(h, kh, sh, pt, pb, self.ceil_mode)
        wo = pool_out_size(w, kw, sw, pl, pr, self.ceil_mode)
        if ho < 1 or wo < 1:
            raise ShapeError(f"kernel {self.kernel} is larger than input {shape} padded by "
                             f"{self.padding}")
        return (n, c, ho, wo)

    def _pool_attrs(self):
        """Positional arguments of the matching gradient or forward op; ``ceil_mode`` goes by
        keyword (:meth:`_mode`)."""
        return (self.kernel, self.stride, self.padding)

    def _mode(self):
        return {"ceil_mode": self.ceil_mode}


class MaxPool2d(_Pool):
    """Max over ``kernel`` windows; padded cells count as -inf. ``stride`` defaults to
    ``kernel`` (SINGA, PyTorch); ``ceil_mode`` keeps a last partial window."""

    def infer(self, x):
        need_float(x)
        return [TensorSpec(self.output_shape(x.shape), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [MaxPool2dGrad(*self._pool_attrs(), **self._mode())(dys[0], inputs[0])]


class MaxPool2dNHWC(MaxPool2d):
    """:class:`MaxPool2d` on channels-last activations, x ``(N, H, W, C)`` and y ``(N,
    Ho, Wo, C)``: the same windows and the same fold (so the same values bit for bit).
    Made by the channels-last pass of CPU inference plans (:mod:`singa_graph.passes.layout`);
    inference only: no gradient."""

    differentiable = False

    def infer(self, x):
        need_float(x)
        if len(x.shape) != 4:
            raise ShapeError(f"MaxPool2dNHWC needs a 4-d NHWC input, got {x.shape}")
        n, h, w, c = x.shape
        _, _, ho, wo = self.output_shape((n, c, h, w))
        return [TensorSpec((n, ho, wo, c), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        raise UnsupportedOpError("MaxPool2dNHWC is made for inference plans and has no "
                                 "gradient")


class MaxPool2dGrad(_Pool):
    """``dx`` of MaxPool2d from ``(dy, x)``: each dy goes to its window's first maximum.

    The argmax is recomputed from x rather than kept as an index output, so the forward's
    output can die early and no integer buffer lives until the backward.

    With ``relu=True`` (set by the fusion pass, passes/fuse.py) ``x`` is the output of a
    ReLU, and that ReLU's backward folds in: the result is ``dx * (x > 0)``.
    """

    def __init__(self, kernel, stride=None, padding=0, relu=False, *, ceil_mode=False):
        super().__init__(kernel, stride, padding, ceil_mode=ceil_mode)
        self.relu = bool(relu)

    def infer(self, dy, x):
        need_float(dy, x)
        y = self.output_shape(x.shape)
        if dy.shape != y:
            raise ShapeError(f"dy {dy.shape} does not match pooled shape {y} of {x.shape}")
        return [TensorSpec(x.shape, x.dtype)]


class AvgPool2d(_Pool):
    """Mean over ``kernel`` windows. With ``count_include_pad`` padded cells count as zeros
    in a divisor of kh*kw (fewer where a ceil-mode window hangs past the trailing padding);
    without (the default), the divisor is the number of real cells."""

    def __init__(self, kernel, stride=None, padding=0, count_include_pad=False, *,
                 ceil_mode=False):
        super().__init__(kernel, stride, padding, ceil_mode=ceil_mode)
        self.count_include_pad = bool(count_include_pad)

    def infer(self, x):
        need_float(x)
        return [TensorSpec(self.output_shape(x.shape), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [AvgPool2dGrad(*self._pool_attrs(), self.count_include_pad,
                              x_shape=inputs[0].shape, **self._mode())(dys[0])]


class AvgPool2dGrad(_Pool):
    """``dx`` of AvgPool2d from ``dy`` alone; ``x_shape`` is the forward input's shape."""

    def __init__(self, kernel, stride=None, padding=0, count_include_pad=False, x_shape=(), *,
                 ceil_mode=False):
        super().__init__(kernel, stride, padding, ceil_mode=ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        self.x_shape = tuple(int(s) for s in x_shape)

    def infer(self, dy):
        need_float(dy)
        y = self.output_shape(self.x_shape)
        if dy.shape != y:
            raise ShapeError(f"dy {dy.shape} does not match pooled shape {y} of {self.x_shape}")
        return [TensorSpec(self.x_shape, dy.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        # linear in dy, and its adjoint is the forward average pooling
        return [AvgPool2d(*self._pool_attrs(), self.count_include_pad,
                          **self._mode())(dys[0])]


class GlobalAveragePool(Operation):
    """Mean over H and W: ``(N, C, H, W) -> (N, C, 1, 1)`` (ONNX GlobalAveragePool)."""

    def infer(self, x):
        need_float(x)
        if x.ndim != 4:
            raise ShapeError(f"global average pooling needs a 4-d NCHW input, got {x.shape}")
        return [TensorSpec(x.shape[:2] + (1, 1), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        from .elementwise import broadcast_to, mul

        x = inputs[0]
        return [mul(broadcast_to(dys[0], x.shape), 1.0 / max(x.shape[2] * x.shape[3], 1))]


def max_pool2d(x, kernel, stride=None, padding=0, ceil_mode=False):
    """Max pooling; ``stride`` defaults to ``kernel``; ``padding`` as in :func:`conv2d`;
    ``ceil_mode`` keeps a last partial window (PyTorch's ``ceil_mode``)."""
    return MaxPool2d(kernel, stride, padding, ceil_mode=ceil_mode)(x)


def avg_pool2d(x, kernel, stride=None, padding=0, count_include_pad=False, ceil_mode=False):
    """Average pooling; ``stride`` defaults to ``kernel``; padding excluded from the divisor
    unless ``count_include_pad``; ``ceil_mode`` keeps a last partial window."""
    return AvgPool2d(kernel, stride, padding, count_include_pad, ceil_mode=ceil_mode)(x)


def global_average_pool(x):
    """Mean over the spatial axes, keeping them as size 1."""
    return GlobalAveragePool()(x)
