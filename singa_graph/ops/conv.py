"""2-d convolution (NCHW) and the two ops its backward is made of.

Attributes are stored normalised: ``stride`` and ``dilation`` as ``(h, w)`` pairs, ``padding``
as ONNX ``pads`` ``(top, left, bottom, right)``; an int or a symmetric ``(ph, pw)`` pair is
accepted as well. The weight has shape ``(O, C // groups, kh, kw)``; ``groups == C`` is a
depthwise convolution.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float, same_dtype

__all__ = ["Conv2d", "Conv2dGradInput", "Conv2dGradWeight", "conv2d"]


def pair(v, what: str, minimum: int = 1) -> tuple:
    """``v`` (an int or a pair of ints) as an ``(h, w)`` pair, each at least ``minimum``."""
    p = (int(v),) * 2 if np.ndim(v) == 0 else tuple(int(a) for a in v)
    if len(p) != 2 or min(p) < minimum:
        raise ShapeError(f"{what} must be an int or a pair of ints >= {minimum}, got {v!r}")
    return p


def pads(v) -> tuple:
    """Padding as ONNX pads ``(top, left, bottom, right)`` from an int, ``(ph, pw)`` or a
    4-tuple already in that order."""
    if np.ndim(v) == 1 and len(v) == 4:
        p = tuple(int(a) for a in v)
        if min(p) < 0:
            raise ShapeError(f"padding must be non-negative, got {v!r}")
        return p
    ph, pw = pair(v, "padding", 0)
    return (ph, pw, ph, pw)


def out_size(n, k, s, d, p0, p1) -> int:
    """Output length of a window of ``k`` taps, dilation ``d``, stride ``s`` (floor mode)."""
    return (n + p0 + p1 - d * (k - 1) - 1) // s + 1


ALGOS = ("auto", "direct", "winograd")


def algo_name(algo) -> str:
    """A conv algorithm: ``"direct"`` (im2col + GEMM), ``"winograd"`` (F(4x4, 3x3) where it
    applies: float32 stride-1 3x3 convs, see runtime/kernels/cpu/winograd.py) or
    ``"auto"``."""
    if algo not in ALGOS:
        raise ValueError(f"conv algo must be one of {ALGOS}, got {algo!r}")
    return algo


class _ConvBase(Operation):
    def __init__(self, stride=1, padding=0, dilation=1, groups=1):
        self.stride = pair(stride, "stride")
        self.padding = pads(padding)
        self.dilation = pair(dilation, "dilation")
        self.groups = int(groups)
        if self.groups < 1:
            raise ShapeError(f"groups must be >= 1, got {groups!r}")

    def _conv_attrs(self):
        return (self.stride, self.padding, self.dilation, self.groups)

    def output_shape(self, x_shape, w_shape) -> tuple:
        """Shape of ``conv2d(x, W)``; raises ShapeError naming both shapes."""
        if len(x_shape) != 4 or len(w_shape) != 4:
            raise ShapeError(f"conv2d needs a 4-d NCHW input and a 4-d weight, got {x_shape} "
                             f"and {w_shape}")
        n, c, h, w = x_shape
        o, cg, kh, kw = w_shape
        g = self.groups
        if c != cg * g:
            raise ShapeError(f"input {x_shape} has {c} channels but weight {w_shape} with "
                             f"groups={g} expects {cg * g}")
        if o % g:
            raise ShapeError(f"weight {w_shape}: {o} output channels do not split into "
                             f"groups={g}")
        (sh, sw), (dh, dw), (pt, pl, pb, pr) = self.stride, self.dilation, self.padding
        ho, wo = out_size(h, kh, sh, dh, pt, pb), out_size(w, kw, sw, dw, pl, pr)
        if ho < 1 or wo < 1 or kh < 1 or kw < 1:
            raise ShapeError(f"kernel of weight {w_shape} (dilation {self.dilation}) is larger "
                             f"than input {x_shape} padded by {self.padding}")
        return (n, o, ho, wo)


class Conv2d(_ConvBase):
    """``y = conv2d(x, W) + b`` (cross-correlation, as in every DL framework and ONNX Conv).

    Inputs: x ``(N, C, H, W)``, W ``(O, C/groups, kh, kw)``, optional b ``(O,)``.

    The fusion passes (passes/fuse.py, passes/inference.py) may give it an epilogue, applied
    by the kernel to each finished output block: ``residual=True`` adds one more input, a
    tensor shaped like ``y`` (a residual Add), and ``act`` applies ``'relu'``, ``'relu6'``,
    ``'hardswish'`` (HardSigmoid constants ``act_args``), ``'silu'``, ``'sigmoid'`` or
    ``'hardsigmoid'`` (``act_args`` again; both the gates of squeeze-and-excitation
    blocks) after it. ``relu=True``
    is ``act='relu'``. ``folded`` names what was folded into the weights (``'BatchNorm'``).
    ``algo`` (see :func:`algo_name`) picks the CPU kernel; the input gradient inherits it.
    ``"auto"`` may round differently from ``"direct"`` (Winograd).
    """

    ACTS = {"": "", "relu": "ReLU", "relu6": "ReLU6", "hardswish": "HardSwish",
            "silu": "SiLU", "sigmoid": "Sigmoid", "hardsigmoid": "HardSigmoid"}

    def __init__(self, stride=1, padding=0, dilation=1, groups=1, relu=False, act="",
                 residual=False, act_args=(1.0 / 6.0, 0.5), algo="auto"):
        super().__init__(stride, padding, dilation, groups)
        self.algo = algo_name(algo)
        self.act = "relu" if relu else str(act)
        if self.act not in self.ACTS:
            raise UnsupportedOpError(f"Conv2d epilogue activation {act!r} is not one of "
                                     f"{sorted(self.ACTS)}")
        self.residual = bool(residual)
        self.act_args = tuple(float(a) for a in act_args)
        self.folded = ""

    @property
    def relu(self) -> bool:
        return self.act == "relu"

    @relu.setter
    def relu(self, on: bool) -> None:
        self.act = "relu" if on else ""

    @property
    def fused(self) -> bool:
        """True when the node computes more than a convolution plus bias."""
        return bool(self.act or self.residual or self.folded)

    @property
    def label(self) -> str:
        """The op as profiles and pictures show it, e.g. ``Conv2d+Add+ReLU``."""
        parts = [self.type] + ([self.folded] if self.folded else []) + \
            (["Add"] if self.residual else []) + ([self.ACTS[self.act]] if self.act else [])
        return "+".join(parts)

    def attributes(self) -> dict:
        a = super().attributes()
        if not self.fused:  # plain convolutions keep the attributes they always had
            for k in ("act", "residual", "act_args", "folded"):
                a.pop(k, None)
            a["relu"] = False
        return a

    def infer(self, x, w, *rest):
        if self.residual:
            if not rest:
                raise ShapeError("a Conv2d with residual=True takes the residual as its "
                                 "last input")
            *rest, r = rest
        if len(rest) > 1:
            raise ShapeError(f"Conv2d takes x, W and an optional bias, got {2 + len(rest)} "
                             "inputs")
        b = rest[0] if rest else None
        need_float(x, w)
        dt = same_dtype(x, w) if b is None else same_dtype(x, w, b)
        y = self.output_shape(self._nchw(x.shape), w.shape)
        if b is not None and b.shape != (w.shape[0],):
            raise ShapeError(f"bias {b.shape} does not match weight {w.shape}")
        y = self._layout(y)
        if self.residual and (r.shape != y or r.dtype != dt):
            raise ShapeError(f"residual {r.shape} {r.dtype} does not match the output {y} "
                             f"{dt}")
        return [TensorSpec(y, dt)]

    def multiply_adds(self, x_shape, w_shape, y_shape) -> int:
        """The multiply-adds of one call (for profiles' GFLOP/s): every output reads
        ``C / groups`` input channels at every tap of the kernel."""
        return int(np.prod(y_shape)) * (self._nchw(x_shape)[1] // self.groups) * \
            self._taps(w_shape)

    def _taps(self, w_shape) -> int:
        return w_shape[2] * w_shape[3]  # OIHW

    def _nchw(self, shape):
        return shape  # Conv2dNHWC reads its input's shape from channels-last

    def _layout(self, shape):
        return shape

    def gradient(self, inputs, outputs, dys, needs):
        from .reduce import sum as _sum

        if self.fused:
            raise UnsupportedOpError(f"a fused {self.label} has no gradient rule: fusion "
                                     "runs after autodiff")
        x, w = inputs[:2]
        dy = dys[0]
        a = self._conv_attrs()
        grads = [Conv2dGradInput(*a, x_shape=x.shape, algo=self.algo)(dy, w) if needs[0]
                 else None,
                 Conv2dGradWeight(*a, w_shape=w.shape, algo=self.algo)(dy, x) if needs[1]
                 else None]
        if len(inputs) == 3:
            grads.append(_sum(dy, (0, 2, 3)) if needs[2] else None)
        return grads


class Conv2dGradInput(_ConvBase):
    """``dx`` of a Conv2d from ``(dy, W)``: the transposed convolution (GEMM + col2im).

    ``x_shape`` is the forward input's shape (strided convs lose it: several x heights map to
    the same output height).
    """

    def __init__(self, stride=1, padding=0, dilation=1, groups=1, x_shape=(), algo="auto"):
        super().__init__(stride, padding, dilation, groups)
        self.x_shape = tuple(int(s) for s in x_shape)
        self.algo = algo_name(algo)

    def infer(self, dy, w):
        need_float(dy, w)
        y = self.output_shape(self.x_shape, w.shape)
        if dy.shape != y:
            raise ShapeError(f"dy {dy.shape} does not match conv output {y} of input "
                             f"{self.x_shape} and weight {w.shape}")
        return [TensorSpec(self.x_shape, same_dtype(dy, w))]

    def gradient(self, inputs, outputs, dys, needs):
        # dx = J(W)^T dy is bilinear in (dy, W): <g, dx> = <conv(g, W), dy>
        dy, w = inputs
        g = dys[0]
        a = self._conv_attrs()
        return [Conv2d(*a, algo=self.algo)(g, w) if needs[0] else None,
                Conv2dGradWeight(*a, w_shape=w.shape, algo=self.algo)(dy, g)
                if needs[1] else None]


class Conv2dGradWeight(_ConvBase):
    """``dW`` of a Conv2d from ``(dy, x)`` (im2col + GEMM, summed over the batch, or
    Winograd where ``algo`` picks it, as for the forward conv)."""

    def __init__(self, stride=1, padding=0, dilation=1, groups=1, w_shape=(), algo="auto"):
        super().__init__(stride, padding, dilation, groups)
        self.w_shape = tuple(int(s) for s in w_shape)
        self.algo = algo_name(algo)

    def infer(self, dy, x):
        need_float(dy, x)
        y = self.output_shape(x.shape, self.w_shape)
        if dy.shape != y:
            raise ShapeError(f"dy {dy.shape} does not match conv output {y} of input "
                             f"{x.shape} and weight {self.w_shape}")
        return [TensorSpec(self.w_shape, same_dtype(dy, x))]

    def gradient(self, inputs, outputs, dys, needs):
        # <g, dW(dy, x)> = <conv(x, g), dy>
        dy, x = inputs
        g = dys[0]
        a = self._conv_attrs()
        return [Conv2d(*a, algo=self.algo)(x, g) if needs[0] else None,
                Conv2dGradInput(*a, x_shape=x.shape, algo=self.algo)(dy, g) if needs[1]
                else None]


def conv2d(x, W, b=None, stride=1, padding=0, dilation=1, groups=1, algo="auto"):
    """2-d convolution of NCHW ``x`` with ``W`` ``(O, C/groups, kh, kw)`` plus optional bias.

    ``padding`` is an int, ``(ph, pw)`` or ONNX ``(top, left, bottom, right)``. ``algo``:
    ``"auto"``, ``"direct"`` (im2col's rounding) or ``"winograd"`` (see :class:`Conv2d`).
    """
    op = Conv2d(stride, padding, dilation, groups, algo=algo)
    return op(x, W) if b is None else op(x, W, b)
