"""SINGA 3.x's ``layer`` module: layers that own parameters and call ops.

A :class:`Layer` creates its parameters the first time it is called (``initialize``), from
the shape of its input, which may be a symbolic :class:`~singa_graph.ir.tensor.Placeholder`:
initialisation happens while the graph is built, before any data exists. Parameters are
:class:`~singa_graph.ir.tensor.Parameter` s holding data; buffers (BatchNorm running stats)
are concrete Tensors with ``requires_grad=False``.

Sub-layers and parameters are found through attributes, also inside lists, tuples and dicts,
and are named hierarchically: ``block1.conv.W``, ``block1.layers.2.scale``::

    class Block(layer.Layer):
        def __init__(self):
            super().__init__()
            self.conv = layer.Conv2d(16, 3, padding=1)
            self.bn = layer.BatchNorm2d()
        def forward(self, x):
            return layer.relu(self.bn(self.conv(x)))   # or autograd.relu

The SINGA 2.x constructor forms (``Linear(in, out)``, ``Conv2d(in, out, k, stride,
padding)``, ``BatchNorm2d(c)``, ``SeparableConv2d(in, out, k, ...)``) work as well;
:mod:`singa_graph.autograd` re-exports these classes under its names. Train/eval behaviour
(BatchNorm, Dropout) follows ``autograd.training`` at call time.
"""
from __future__ import annotations

import contextlib
import functools
import math

import numpy as np

from . import initializer
from . import ops as _ops
from .errors import CheckpointError, ShapeError
from .ir import node as _node
from .ir import op as _op
from .ir.tensor import Parameter, Tensor

__all__ = ["Layer", "Linear", "Conv2d", "SeparableConv2d", "BatchNorm2d", "Pooling2d",
           "MaxPool2d", "AvgPool2d", "MaxPool1d", "AvgPool1d", "GlobalAvgPool2d", "ReLU",
           "LeakyReLU", "Sigmoid", "Tanh", "SoftMax", "Flatten", "Reshape", "Dropout", "Cat",
           "Add", "SoftMaxCrossEntropy", "MeanSquareError", "CrossEntropy"]


def _training() -> bool:
    from . import autograd

    return bool(autograd.training)


@contextlib.contextmanager
def _eager_init():
    """Initialisers run eagerly and unrecorded, even while a graph is being built."""
    with _op.not_building(), _op.no_grad():
        yield


def _wrap_initialize(f):
    @functools.wraps(f)
    def initialize(self, *args, **kwargs):
        self._link_children()
        with _eager_init():
            f(self, *args, **kwargs)
        object.__setattr__(self, "_initialized", True)
        self._name_tensors()

    initialize._singa_wrapped = True
    return initialize


def _wrap_call(f):
    @functools.wraps(f)
    def call(self, *args, **kwargs):
        if not self._initialized:
            self.initialize(*args, **kwargs)
        with _node.scope(self.name):  # nodes remember their layer (clusters in pictures)
            return f(self, *args, **kwargs)

    call._singa_wrapped = True
    return call


class Layer:
    """Base of all layers (SINGA's ``layer.Layer``; also ``autograd.Layer``).

    Subclasses implement ``initialize(*inputs)`` (create parameters from input shapes; runs
    once, before the first forward) and ``forward(*inputs)``; calling the layer runs
    ``forward``. Subclasses written in the SINGA 2.x style that override ``__call__`` work
    too. Parameters are the attributes holding a Tensor with ``stores_grad``; buffers are
    registered with :meth:`register_buffer`.
    """

    sep = "."
    _initialized = False
    _parent = None
    _attr = None
    _name = None

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        for meth, wrap in (("initialize", _wrap_initialize), ("forward", _wrap_call),
                           ("__call__", _wrap_call)):
            f = cls.__dict__.get(meth)
            if f is not None and not getattr(f, "_singa_wrapped", False):
                setattr(cls, meth, wrap(f))

    def __init__(self, name=None):
        d = vars(self)  # keep what a subclass registered before calling this
        d.setdefault("_initialized", False)
        d["_name"] = name if name is not None else d.get("_name")
        d.setdefault("_buffers", [])
        d.setdefault("_layers", {})

    # ------------------------------------------------------------------ protocol
    def initialize(self, *inputs):
        """Create parameters and states from the inputs' shapes (no data needed)."""

    def forward(self, *inputs):
        """Compute the outputs from the inputs by calling ops or sub-layers."""
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------------ naming
    @property
    def name(self):
        """Hierarchical name (``block1.conv``); None for a root layer without a name."""
        if self._parent is not None and self._attr is not None:
            prefix = self._parent._prefix()
            return prefix + self._attr
        return self._name

    @name.setter
    def name(self, value):
        object.__setattr__(self, "_name", value)

    def _prefix(self) -> str:
        """Prefix of the names of this layer's parameters ('' for the root, as SINGA)."""
        return self.name + self.sep if self._parent is not None and self.name else ""

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        if isinstance(value, Layer) and not name.startswith("_"):
            value._adopt(self, name)

    def _adopt(self, parent, attr):
        if self._parent is None and parent is not self:
            object.__setattr__(self, "_parent", parent)
            object.__setattr__(self, "_attr", attr)

    def _children(self):
        """``(attribute path, layer)`` for the direct sub-layers, in attribute order."""
        for name, v in list(vars(self).items()):
            if name == "_layers":
                yield from v.items()
            elif name.startswith("_"):
                continue
            elif isinstance(v, Layer):
                yield name, v
            elif isinstance(v, (list, tuple)):
                for i, x in enumerate(v):
                    if isinstance(x, Layer):
                        yield f"{name}{self.sep}{i}", x
            elif isinstance(v, dict):
                for k, x in v.items():
                    if isinstance(x, Layer):
                        yield f"{name}{self.sep}{k}", x

    def _link_children(self):
        for path, child in self._children():
            child._adopt(self, path)

    def _own(self, buffers: bool):
        """``(attribute, tensor)`` for this layer's own parameters (or buffers)."""
        names = vars(self).get("_buffers", [])
        for name, v in list(vars(self).items()):
            if not isinstance(v, Tensor) or name.startswith("_"):
                continue
            if (name in names) if buffers else (v.stores_grad and name not in names):
                yield name, v

    def _name_tensors(self):
        prefix = self._prefix()
        for attr, t in list(self._own(False)) + list(self._own(True)):
            t.name = prefix + attr

    def register_buffer(self, name, tensor):
        """Attach a non-trainable state tensor (e.g. a running mean) as attribute ``name``;
        it is part of :meth:`get_states`, not of :meth:`get_params`."""
        if "_buffers" not in vars(self):
            object.__setattr__(self, "_buffers", [])
        if name not in self._buffers:
            self._buffers.append(name)
        object.__setattr__(self, name, tensor)

    def register_layers(self, *args):
        """SINGA's ``register_layers``: add sub-layers named ``ClassName_i`` (or by the keys
        of one dict argument)."""
        if "_layers" not in vars(self):
            object.__setattr__(self, "_layers", {})
        items = (args[0].items() if len(args) == 1 and isinstance(args[0], dict) else
                 ((f"{type(v).__name__}_{i}", v) for i, v in enumerate(args)))
        for name, v in items:
            if isinstance(v, Layer):
                self._layers[name] = v
                v._adopt(self, name)

    # ------------------------------------------------------------------ params and states
    def _collect(self, buffers: bool) -> dict:
        self._link_children()
        out = {}
        self._name_tensors()
        for _, t in self._own(False):
            out[t.name] = t
        if buffers:
            for _, t in self._own(True):
                out[t.name] = t
        for _, child in self._children():
            out.update(child._collect(buffers))
        return out

    def get_params(self) -> dict:
        """``{name: Parameter}`` of this layer and all sub-layers (initialised ones only),
        names hierarchical (``block1.conv.W``)."""
        return self._collect(False)

    def get_states(self) -> dict:
        """Parameters plus buffers (BatchNorm running mean/var): everything a checkpoint
        needs."""
        return self._collect(True)

    def _assign(self, targets: dict, values: dict, strict: bool, what: str):
        if strict:
            missing = sorted(set(targets) - set(values))
            unknown = sorted(set(values) - set(targets))
            if missing or unknown:
                raise CheckpointError(f"{what}: missing {missing}, unexpected {unknown}")
        for name, t in targets.items():
            if name not in values:
                continue
            v = values[name]
            arr = v.data if isinstance(v, Tensor) else np.asarray(v)
            if arr is None or tuple(arr.shape) != tuple(t.shape):
                raise CheckpointError(f"{what}: {name} has shape {t.shape}, got "
                                      f"{None if arr is None else tuple(arr.shape)}")
            t.copy_from_numpy(arr)

    def set_params(self, parameters: dict, strict: bool = False):
        """Copy values (Tensors or numpy arrays) into the parameters of the same names.
        Names not present are left alone, unknown names ignored, unless ``strict``."""
        self._assign(self.get_params(), parameters, strict, "set_params")

    def set_states(self, states: dict, strict: bool = False):
        """Like :meth:`set_params` for parameters and buffers."""
        self._assign(self.get_states(), states, strict, "set_states")

    # SINGA helpers; tensors here live on one device and keep their dtype
    def device_check(self, *inputs):
        for x in inputs[1:]:
            if x.device != inputs[0].device:
                x.to_device(inputs[0].device)

    def dtype_check(self, *inputs):
        for x in inputs[1:]:
            if x.dtype != inputs[0].dtype and x.data is not None:
                x.to_type(inputs[0].dtype)

    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r})"


Layer.initialize = _wrap_initialize(Layer.initialize)


# ---------------------------------------------------------------------- helpers
def _pair(v, what):
    if isinstance(v, (int, np.integer)):
        return (int(v), int(v))
    v = tuple(int(a) for a in v)
    if len(v) != 2:
        raise TypeError(f"{what} must be an int or a pair, got {v!r}")
    return v


def _padding(p):
    """SINGA padding (int, (ph, pw) or (top, bottom, left, right)) as the ops' ONNX pads
    ``(top, left, bottom, right)``."""
    if isinstance(p, (int, np.integer)):
        return (int(p),) * 4
    p = tuple(int(a) for a in p)
    if len(p) == 2:
        return (p[0], p[1], p[0], p[1])
    if len(p) == 4:
        return (p[0], p[2], p[1], p[3])
    raise TypeError(f"padding must be an int, a pair or 4 values, got {p!r}")


def _same_padding(mode, hw, kernel, stride, dilation=(1, 1)):
    """ONNX pads for SAME_UPPER / SAME_LOWER (output size = ceil(input / stride))."""
    pads = []
    for n, k, s, d in zip(hw, kernel, stride, dilation):
        total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
        small, big = total // 2, total - total // 2
        pads.append((small, big) if mode == "SAME_UPPER" else (big, small))
    return (pads[0][0], pads[1][0], pads[0][1], pads[1][1])


def _float(dtype):
    return dtype if np.dtype(dtype).kind == "f" else np.dtype(np.float32)


def _param(shape, like, init, *args, **kw):
    p = Parameter(shape, device=like.device, dtype=_float(like.dtype))
    init(p, *args, **kw)
    return p


# ---------------------------------------------------------------------- layers with params
class Linear(Layer):
    """``y = x @ W + b`` with W of shape ``(in, out)``.

    ``Linear(out_features, bias=True)`` (SINGA 3) or ``Linear(in_features, out_features,
    bias=True)`` (SINGA 2); ``in_features`` is taken from the input in any case. W is drawn
    from N(0, 2 / (in + out)) (SINGA; glorot normal), b starts at zero. An input with more
    than 2 dimensions is flattened to ``(N, -1)`` first (SINGA needs 2-d input), so the
    Model-API MLP of the SINGA docs runs on ``(N, 1, H, W)`` images.
    """

    def __init__(self, out_features=None, *args, bias=True, in_features=None, **kwargs):
        super().__init__(kwargs.pop("name", None))
        if kwargs:
            raise TypeError(f"Linear: unexpected arguments {sorted(kwargs)}")
        if args:
            in_features, out_features = out_features, args[0]
            if len(args) > 1:
                bias = args[1]
        if out_features is None:
            raise TypeError("Linear needs out_features")
        self.in_features = in_features
        self.out_features = int(out_features)
        self.bias = bool(bias)

    def initialize(self, x):
        if x.ndim < 2:
            raise ShapeError(f"Linear expects (N, features) input, got shape {x.shape}")
        n_in = int(np.prod(x.shape[1:], dtype=np.int64))
        if self.in_features is not None and self.in_features != n_in:
            raise ShapeError(f"Linear {self.name or ''} was declared with {self.in_features} "
                             f"input features, got input of shape {x.shape}")
        self.in_features = n_in
        self.W = _param((n_in, self.out_features), x, initializer.glorot_normal)
        if self.bias:
            self.b = _param((self.out_features,), x, initializer.zeros)

    def forward(self, x):
        if x.ndim != 2:
            x = _ops.flatten(x, 1)
        y = _ops.matmul(x, self.W)
        return _ops.add_bias(y, self.b, axis=0) if self.bias else y


class Conv2d(Layer):
    """2-d convolution of NCHW input; W has shape ``(out, in/group, kh, kw)``, b ``(out,)``.

    SINGA 3: ``Conv2d(nb_kernels, kernel_size, stride=1, padding=0, dilation=1, group=1,
    bias=True, pad_mode="NOTSET", activation="NOTSET")``. SINGA 2: ``Conv2d(in_channels,
    out_channels, kernel_size, stride=1, padding=0, dilation=1, group=1, bias=True)``
    (positionally or by keyword). ``padding`` is an int, ``(ph, pw)`` or SINGA's
    ``(top, bottom, left, right)``; ``pad_mode`` ``SAME_UPPER``/``SAME_LOWER`` computes it.
    ``activation="RELU"`` appends a ReLU. W ~ N(0, 2 / (in/group*kh*kw + out)) as SINGA.
    """

    def __init__(self, nb_kernels=None, kernel_size=None, *args, stride=1, padding=0,
                 dilation=1, group=1, bias=True, pad_mode="NOTSET", activation="NOTSET",
                 in_channels=None, out_channels=None, groups=None, name=None):
        super().__init__(name)
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
        self.in_channels = in_channels
        self.nb_kernels = int(nb_kernels)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.dilation = _pair(dilation, "dilation")
        self.group = int(groups if groups is not None else group)
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
                        self.dilation, self.group)
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
        self.nb_kernels, self.kernel_size = int(nb_kernels), kernel_size
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


class BatchNorm2d(Layer):
    """Batch normalisation over channels: params ``scale`` (ones) and ``bias`` (zeros),
    buffers ``running_mean`` (zeros) and ``running_var`` (ones).

    ``BatchNorm2d(momentum=0.9)`` (SINGA 3) or ``BatchNorm2d(num_channels, momentum=0.9)``
    (SINGA 2). Uses batch statistics and updates the running ones while
    ``autograd.training`` is true, the running ones otherwise. ``momentum`` weights the new
    batch, as SINGA's kernels (see :mod:`singa_graph.ops.norm`).
    """

    def __init__(self, *args, momentum=0.9, eps=1e-5, name=None):
        super().__init__(name)
        self.channels = int(args[0]) if args else None
        if len(args) > 1:
            momentum = args[1]
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"BatchNorm2d: momentum must lie in [0, 1], got {momentum}")
        self.momentum, self.eps = float(momentum), float(eps)

    def initialize(self, x):
        c = x.shape[1]
        if self.channels is not None and self.channels != c:
            raise ShapeError(f"BatchNorm2d {self.name or ''} was declared with {self.channels} "
                             f"channels, got input of shape {x.shape}")
        self.channels = c
        self.scale = _param((c,), x, initializer.ones)
        self.bias = _param((c,), x, initializer.zeros)
        dt = _float(x.dtype)
        self.register_buffer("running_mean", Tensor((c,), x.device, dt, requires_grad=False))
        self.register_buffer("running_var", Tensor(data=np.ones(c, dt), device=x.device,
                                                   requires_grad=False))

    def forward(self, x):
        return _ops.batchnorm_2d(x, self.scale, self.bias, self.running_mean, self.running_var,
                                 self.momentum, self.eps, _training())


# ---------------------------------------------------------------------- pooling
class Pooling2d(Layer):
    """Max (``is_max``) or average pooling; ``stride`` defaults to ``kernel_size``;
    ``padding`` as in :class:`Conv2d` (``pad_mode`` SAME_UPPER/SAME_LOWER supported)."""

    def __init__(self, kernel_size, stride=None, padding=0, is_max=True, pad_mode="NOTSET"):
        super().__init__()
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else _pair(stride, "stride")
        self.padding = _padding(padding or 0)
        self.is_max, self.pad_mode = bool(is_max), pad_mode

    def initialize(self, x):
        if self.pad_mode in ("SAME_UPPER", "SAME_LOWER"):
            self.padding = _same_padding(self.pad_mode, x.shape[2:], self.kernel_size,
                                         self.stride)

    def forward(self, x):
        fn = _ops.max_pool2d if self.is_max else _ops.avg_pool2d
        return fn(x, self.kernel_size, self.stride, self.padding)


class MaxPool2d(Pooling2d):
    """``MaxPool2d(kernel_size, stride=None, padding=0, pad_mode="NOTSET")``."""

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET"):
        super().__init__(kernel_size, stride, padding, True, pad_mode)


class GlobalAvgPool2d(Layer):
    """Mean over the spatial axes of an NCHW input, keeping them as size 1:
    ``(N, C, H, W) -> (N, C, 1, 1)``."""

    def forward(self, x):
        return _ops.global_average_pool(x)


class AvgPool2d(Pooling2d):
    """``AvgPool2d(kernel_size, stride=None, padding=0, pad_mode="NOTSET")``; padded cells
    are excluded from the average (SINGA's kernels, ONNX default)."""

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET"):
        super().__init__(kernel_size, stride, padding, False, pad_mode)


class MaxPool1d(Pooling2d):
    """Max pooling along the last axis of an (N, C, 1, W) input."""

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET"):
        stride = kernel_size if stride is None else stride
        super().__init__((1, kernel_size), (1, stride), (0, padding), True, pad_mode)


class AvgPool1d(Pooling2d):
    """Average pooling along the last axis of an (N, C, 1, W) input."""

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET"):
        stride = kernel_size if stride is None else stride
        super().__init__((1, kernel_size), (1, stride), (0, padding), False, pad_mode)


# ---------------------------------------------------------------------- parameter-free
class _Fn(Layer):
    """A layer that only calls one op."""

    fn = None

    def forward(self, *xs):
        return type(self).fn(*xs)


class ReLU(_Fn):
    """``max(x, 0)``."""

    fn = staticmethod(lambda x: _ops.relu(x))


class Sigmoid(_Fn):
    fn = staticmethod(lambda x: _ops.sigmoid(x))


class Tanh(_Fn):
    fn = staticmethod(lambda x: _ops.tanh(x))


class Add(_Fn):
    """``a + b`` (broadcasting)."""

    fn = staticmethod(lambda a, b: _ops.add(a, b))


class SoftMaxCrossEntropy(_Fn):
    """``forward(x, t)``: softmax cross-entropy of logits ``x`` and labels or one-hot ``t``,
    averaged over the batch."""

    @staticmethod
    def fn(x, t):
        from .autograd import softmax_cross_entropy

        return softmax_cross_entropy(x, t)


class MeanSquareError(_Fn):
    """``forward(x, t)``: SINGA's mean squared error."""

    fn = staticmethod(lambda x, t: _ops.mse_loss(x, t))


class CrossEntropy(_Fn):
    """``forward(y, t)``: cross-entropy of probabilities ``y`` and targets ``t``."""

    fn = staticmethod(lambda y, t: _ops.cross_entropy(y, t))


class LeakyReLU(Layer):
    """``x`` for ``x > 0``, ``a * x`` otherwise."""

    def __init__(self, a=0.01):
        super().__init__()
        self.a = a

    def forward(self, x):
        return _ops.leakyrelu(x, self.a)


class SoftMax(Layer):
    """Softmax along ``axis`` (1: the classes of an (N, C) batch)."""

    def __init__(self, axis=1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return _ops.softmax(x, self.axis)


class Flatten(Layer):
    """2-d view ``(prod(shape[:axis]), prod(shape[axis:]))``."""

    def __init__(self, axis=1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return _ops.flatten(x, self.axis)


class Reshape(Layer):
    """``forward(x, shape)``: ``x`` viewed with ``shape``."""

    def forward(self, x, shape):
        return _ops.reshape(x, shape)


class Dropout(Layer):
    """Zero elements with probability ``ratio`` (scaling the rest by ``1/(1-ratio)``) while
    ``autograd.training`` is true; the identity otherwise."""

    def __init__(self, ratio=0.5):
        super().__init__()
        self.ratio = ratio

    def forward(self, x):
        return _ops.dropout(x, self.ratio, training=_training())


class Cat(Layer):
    """``forward(xs)``: concatenate a list of tensors along ``axis``."""

    def __init__(self, axis=0):
        super().__init__()
        self.axis = axis

    def forward(self, xs):
        return _ops.cat(list(xs), self.axis)
