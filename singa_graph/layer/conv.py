"""Convolution layers: Conv2d, SeparableConv2d."""
from __future__ import annotations

import math

from .. import initializer
from .. import ops as _ops
from ..errors import ShapeError
from .base import Layer, _int_arg, _pair, _padding, _param, _same_padding


class Conv2d(Layer):
    """2-d convolution of NCHW input; W has shape ``(out, in/group, kh, kw)``, b ``(out,)``.

    SINGA 3: ``Conv2d(nb_kernels, kernel_size, stride=1, padding=0, dilation=1, group=1,
    bias=True, pad_mode="NOTSET", activation="NOTSET")``. SINGA 2: ``Conv2d(in_channels,
    out_channels, kernel_size, stride=1, padding=0, dilation=1, group=1, bias=True)``
    (positionally or by keyword). ``padding`` is an int, ``(ph, pw)`` or SINGA's
    ``(top, bottom, left, right)``; ``pad_mode`` ``SAME_UPPER``/``SAME_LOWER`` computes it.
    ``activation="RELU"`` appends a ReLU. W ~ N(0, 2 / (in/group*kh*kw + out)) as SINGA.
    ``algo`` picks the CPU algorithm: ``"auto"`` (Winograd for float32 stride-1 3x3 convs of
    >= 16 channels and >= 128 output tiles), ``"direct"`` (im2col + GEMM, exact as im2col
    rounds) or ``"winograd"``; float64 convs never run Winograd.
    """

    def __init__(self, nb_kernels=None, kernel_size=None, *args, stride=1, padding=0,
                 dilation=1, group=1, bias=True, pad_mode="NOTSET", activation="NOTSET",
                 in_channels=None, out_channels=None, groups=None, name=None, algo="auto"):
        super().__init__(name)
        self.algo = _ops.conv.algo_name(algo)
        if args:  # SINGA 2: (in, out, k, stride, padding, dilation, group, bias)
            in_channels, nb_kernels, kernel_size = nb_kernels, kernel_size, args[0]
            extra = list(args[1:]) + [None] * 5
            stride = stride if extra[0] is None else extra[0]
            padding = padding if extra[1] is None else extra[1]
            dilation = dilation if extra[2] is None else extra[2]
            group = group if extra[3] is None else extra[3]
            bias = bias if extra[4] is None else extra[4]
        elif out_channels is not None:  # SINGA 2 by keyword
            if nb_kernels is not None and in_channels is None:
                in_channels = nb_kernels
            nb_kernels = out_channels
        if nb_kernels is None or kernel_size is None:
            raise TypeError("Conv2d needs nb_kernels (out channels) and kernel_size")
        self.in_channels = None if in_channels is None else _int_arg(in_channels,
                                                                      "Conv2d: in_channels")
        self.nb_kernels = _int_arg(nb_kernels, "Conv2d: nb_kernels")
        self.kernel_size = _pair(kernel_size, "Conv2d: kernel_size")
        self.stride = _pair(stride, "Conv2d: stride")
        self.dilation = _pair(dilation, "Conv2d: dilation")
        self.group = _int_arg(groups if groups is not None else group, "Conv2d: group")
        self.bias = bool(bias)
        self.pad_mode = pad_mode
        self.padding = _padding(padding or 0)
        self.activation = activation
        if self.nb_kernels % self.group:
            raise ShapeError(f"Conv2d: {self.nb_kernels} kernels do not split into "
                             f"{self.group} groups")

    def initialize(self, x):
        if x.ndim != 4:
            raise ShapeError(f"Conv2d expects NCHW input, got shape {x.shape}")
        c = x.shape[1]
        if self.in_channels is not None and self.in_channels != c:
            raise ShapeError(f"Conv2d {self.name or ''} was declared with {self.in_channels} "
                             f"input channels, got input of shape {x.shape}")
        if c % self.group:
            raise ShapeError(f"Conv2d: {c} input channels do not split into {self.group} groups")
        self.in_channels = c
        kh, kw = self.kernel_size
        shape = (self.nb_kernels, c // self.group, kh, kw)
        std = math.sqrt(2.0 / (shape[1] * kh * kw + self.nb_kernels))
        self.W = _param(shape, x, initializer.gaussian, std=std)
        if self.bias:
            self.b = _param((self.nb_kernels,), x, initializer.zeros)
        if self.pad_mode in ("SAME_UPPER", "SAME_LOWER"):
            self.padding = _same_padding(self.pad_mode, x.shape[2:], self.kernel_size,
                                         self.stride, self.dilation)

    def forward(self, x):
        y = _ops.conv2d(x, self.W, self.b if self.bias else None, self.stride, self.padding,
                        self.dilation, self.group, algo=self.algo)
        if self.activation == "RELU":
            y = _ops.relu(y)
        return y


class SeparableConv2d(Layer):
    """Depthwise convolution (``group = in_channels``) followed by a 1x1 pointwise one.

    ``SeparableConv2d(nb_kernels, kernel_size, stride=1, padding=0, bias=False)`` (SINGA 3)
    or ``SeparableConv2d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    bias=False)`` (SINGA 2). Sub-layers: ``depthwise_conv`` and ``point_conv``.
    """

    def __init__(self, nb_kernels, kernel_size, *args, stride=1, padding=0, bias=False,
                 name=None):
        super().__init__(name)
        self.in_channels = None
        if args:
            self.in_channels, nb_kernels, kernel_size = nb_kernels, kernel_size, args[0]
            if len(args) > 1:
                stride = args[1]
            if len(args) > 2:
                padding = args[2]
            if len(args) > 3:
                bias = args[3]
        self.nb_kernels = _int_arg(nb_kernels, "SeparableConv2d: nb_kernels")
        self.kernel_size = kernel_size
        self.stride, self.padding, self.bias = stride, padding, bool(bias)

    def initialize(self, x):
        c = x.shape[1]
        if self.in_channels is not None and self.in_channels != c:
            raise ShapeError(f"SeparableConv2d {self.name or ''} was declared with "
                             f"{self.in_channels} input channels, got input of shape {x.shape}")
        self.in_channels = c
        self.depthwise_conv = Conv2d(c, self.kernel_size, stride=self.stride,
                                     padding=self.padding, group=c, bias=self.bias)
        self.point_conv = Conv2d(self.nb_kernels, 1, bias=self.bias)

    def forward(self, x):
        return self.point_conv(self.depthwise_conv(x))
