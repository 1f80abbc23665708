"""The Layer base class and the helpers the layer families share."""
from __future__ import annotations

import contextlib
import functools
import math

import numpy as np

from .. import functional
from ..errors import CheckpointError
from ..ir import node as _node
from ..ir import op as _op
from ..ir.tensor import Parameter, Tensor


def _training() -> bool:
    return functional.is_training()


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
        name = self.name
        if name is None:  # a scope of None keeps the enclosing one: a root model's call
            return f(self, *args, **kwargs)
        with _node.scope(name):  # nodes remember their layer (clusters in pictures)
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
            arr = v.host_data() if isinstance(v, Tensor) else np.asarray(v)
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
def _int_arg(v, what, minimum=1):
    """An integer layer argument, refused (as PyTorch does) when it is not an integer or is
    below ``minimum``; ``Linear(2.7)`` must not quietly become ``Linear(2)``."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, got {v!r}")
    if v < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {v}")
    return int(v)


def _pair(v, what, minimum=1):
    if isinstance(v, (int, np.integer)):
        v = _int_arg(v, what, minimum)
        return (v, v)
    v = tuple(_int_arg(a, what, minimum) for a in v)
    if len(v) != 2:
        raise TypeError(f"{what} must be an int or a pair, got {v!r}")
    return v


def _padding(p):
    """SINGA padding (int, (ph, pw) or (top, bottom, left, right)) as the ops' ONNX pads
    ``(top, left, bottom, right)``."""
    if isinstance(p, (int, np.integer)):
        return (_int_arg(p, "padding", 0),) * 4
    p = tuple(_int_arg(a, "padding", 0) for a in p)
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



class _Fn(Layer):
    """A layer that only calls one op."""

    fn = None

    def forward(self, *xs):
        return type(self).fn(*xs)
