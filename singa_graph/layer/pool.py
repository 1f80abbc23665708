"""Pooling layers."""
from __future__ import annotations

from .. import ops as _ops
from .base import Layer, _pair, _padding, _same_padding


class Pooling2d(Layer):
    """Max (``is_max``) or average pooling; ``stride`` defaults to ``kernel_size``;
    ``padding`` as in :class:`Conv2d` (``pad_mode`` SAME_UPPER/SAME_LOWER supported).
    ``ceil_mode`` (PyTorch's keyword) keeps a last partial window where the output size
    would otherwise be rounded down."""

    def __init__(self, kernel_size, stride=None, padding=0, is_max=True, pad_mode="NOTSET",
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else _pair(stride, "stride")
        self.padding = _padding(padding or 0)
        self.is_max, self.pad_mode = bool(is_max), pad_mode
        self.ceil_mode = bool(ceil_mode)

    def initialize(self, x):
        if self.pad_mode in ("SAME_UPPER", "SAME_LOWER"):
            self.padding = _same_padding(self.pad_mode, x.shape[2:], self.kernel_size,
                                         self.stride)

    def forward(self, x):
        if self.is_max:
            return _ops.max_pool2d(x, self.kernel_size, self.stride, self.padding,
                                   ceil_mode=self.ceil_mode)
        return _ops.avg_pool2d(x, self.kernel_size, self.stride, self.padding,
                               ceil_mode=self.ceil_mode)


class MaxPool2d(Pooling2d):
    """``MaxPool2d(kernel_size, stride=None, padding=0, pad_mode="NOTSET", ceil_mode=False)``."""

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET", ceil_mode=False):
        super().__init__(kernel_size, stride, padding, True, pad_mode, ceil_mode)


class GlobalAvgPool2d(Layer):
    """Mean over the spatial axes of an NCHW input, keeping them as size 1:
    ``(N, C, H, W) -> (N, C, 1, 1)``."""

    def forward(self, x):
        return _ops.global_average_pool(x)


class AvgPool2d(Pooling2d):
    """``AvgPool2d(kernel_size, stride=None, padding=0, pad_mode="NOTSET", ceil_mode=False)``;
    padded cells are excluded from the average (SINGA's kernels, ONNX default)."""

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET", ceil_mode=False):
        super().__init__(kernel_size, stride, padding, False, pad_mode, ceil_mode)


class MaxPool1d(Pooling2d):
    """Max pooling along the last axis of an (N, C, 1, W) input."""

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET", ceil_mode=False):
        stride = kernel_size if stride is None else stride
        super().__init__((1, kernel_size), (1, stride), (0, padding), True, pad_mode, ceil_mode)


class AvgPool1d(Pooling2d):
    """Average pooling along the last axis of an (N, C, 1, W) input."""

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET", ceil_mode=False):
        stride = kernel_size if stride is None else stride
        super().__init__((1, kernel_size), (1, stride), (0, padding), False, pad_mode, ceil_mode)
