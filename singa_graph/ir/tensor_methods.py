"""SINGA's Tensor methods, as a mixin of the IR :class:`~singa_graph.ir.tensor.Tensor`.

Arithmetic operators call ops, so they work on symbolic (graph-mode) tensors too and are
recorded for autograd. The rest follow SINGA's ``tensor.Tensor``: in-place updates and
comparisons act on the data directly (SINGA does not record them for autograd either).

SINGA conventions kept here: ``t == 3.45`` and ``t < x`` compare elementwise and give 0/1 in
``t``'s dtype (float for float tensors; ``==`` between two Tensors is identity, see
``__eq__``); an integer tensor combined with a Python float is
converted to float32 first; ``t.size()`` and ``t.ndim()`` may be called.
"""
from __future__ import annotations

import numpy as np

from . import bindings, dtypes


class CallableInt(int):
    """An int that can also be called: ``t.size`` and SINGA's ``t.size()`` both work."""

    def __call__(self):
        return int(self)


def _data(x):
    """The host values of a Tensor (a copy for a GPU tensor); other values as they are."""
    from .tensor import Tensor

    return x.host_data() if isinstance(x, Tensor) else x


def _promote(a, b):
    """SINGA's promotion: an integer tensor meeting a Python float becomes float32."""
    from .tensor import Tensor

    def fix(t, other):
        if (isinstance(t, Tensor) and t.dtype.kind in "iu" and isinstance(other, float)):
            return bindings.ops().cast(t, dtypes.float32)
        return t

    return fix(a, b), fix(b, a)


def _binary(opname, reflected=False):
    def method(self, other):
        a, b = (other, self) if reflected else (self, other)
        a, b = _promote(a, b)
        return getattr(bindings.ops(), opname)(a, b)

    method.__name__ = f"__{'r' if reflected else ''}{opname}__"
    method.__doc__ = f"``{opname}`` as a graph/eager op (broadcasting)."
    return method


def _inplace(opname, ufunc):
    def method(self, x):
        from .op import is_building

        eager = self.data is not None and not is_building()
        if eager and getattr(x, "data", 0) is not None:
            host = self.host_data()  # the data itself on the CPU, a copy of a GPU's
            ufunc(host, _data(x), out=host, casting="unsafe")
            if host is not self.data:
                self.device.copy(self.data, host)
            return self
        return getattr(bindings.ops(), opname)(self, x)  # symbolic: an out-of-place graph op

    method.__name__ = f"__i{opname}__"
    method.__doc__ = (f"In place ``{opname}`` on the data when the tensor is concrete (as "
                      "SINGA: not recorded for autograd); a graph op otherwise.")
    return method


def _compare(ufunc, name):
    def method(self, other):
        if other is None:
            return False if name == "__eq__" else True
        self._need_data(name)
        return self._wrap(ufunc(self.host_data(), _data(other)).astype(self.dtype))

    method.__name__ = name
    method.__doc__ = f"Elementwise ``{name}`` as a tensor of 0/1 in this dtype (no gradient)."
    return method


class SingaTensorMethods:
    """SINGA ``tensor.Tensor`` methods; mixed into the IR Tensor."""

    __array_priority__ = 1000  # make ``ndarray + Tensor`` call Tensor.__radd__
    __hash__ = object.__hash__  # __eq__ is elementwise (SINGA); identity stays the hash

    # ------------------------------------------------------------------ arithmetic (ops)
    __add__, __radd__ = _binary("add"), _binary("add", True)
    __sub__, __rsub__ = _binary("sub"), _binary("sub", True)
    __mul__, __rmul__ = _binary("mul"), _binary("mul", True)
    __truediv__, __rtruediv__ = _binary("div"), _binary("div", True)
    __pow__ = _binary("pow")

    def __matmul__(self, o):
        return bindings.ops().matmul(self, o)

    def __neg__(self):
        return bindings.ops().neg(self)

    # ------------------------------------------------------------------ in place (data)
    __iadd__ = _inplace("add", np.add)
    __isub__ = _inplace("sub", np.subtract)
    __imul__ = _inplace("mul", np.multiply)
    __itruediv__ = _inplace("div", np.divide)

    # ------------------------------------------------------------------ comparisons (data)
    __lt__ = _compare(np.less, "__lt__")
    __le__ = _compare(np.less_equal, "__le__")
    __gt__ = _compare(np.greater, "__gt__")
    __ge__ = _compare(np.greater_equal, "__ge__")
    _eq = _compare(np.equal, "__eq__")
    _ne = _compare(np.not_equal, "__ne__")

    def __eq__(self, other):
        """``t == 3.45`` (a number or array) compares elementwise, as SINGA; between two
        Tensors ``==`` is identity, so tensors can be found in lists and sets (``list.index``,
        ``in``); ``tensor.eq(a, b)`` compares two tensors elementwise."""
        if isinstance(other, SingaTensorMethods):
            return self is other
        return self._eq(other)

    def __ne__(self, other):
        if isinstance(other, SingaTensorMethods):
            return self is not other
        return self._ne(other)

    def __floordiv__(self, other):
        self._need_data("__floordiv__")
        return self._wrap(np.floor(self.host_data() / _data(other)).astype(self.dtype))

    # ------------------------------------------------------------------ shape (ops)
    def reshape(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        return bindings.ops().reshape(self, shape)

    def transpose(self, *axes):
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = axes[0]
        return bindings.ops().transpose(self, axes or None)

    @property
    def T(self):
        return self.transpose()

    def sum(self, axis=None, keepdims=False):
        return bindings.ops().sum(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return bindings.ops().mean(self, axis, keepdims)

    # ------------------------------------------------------------------ SINGA data methods
    def _wrap(self, arr):
        """A new concrete tensor (no gradient) holding ``arr``, on this tensor's device."""
        return _new(arr, self)

    def copy_from(self, t, offset=0):
        """Copy the values of a Tensor or numpy array into this tensor (same size)."""
        if isinstance(t, SingaTensorMethods):
            t._need_data("copy_from")
            t = t.host_data()
        elif not isinstance(t, np.ndarray):
            raise ValueError("copy_from: t should be a Tensor or a numpy array")
        self.copy_from_numpy(t, offset)

    def l1(self):
        """Mean absolute value (SINGA's ``l1``: the L1 norm divided by the size)."""
        self._need_data("l1")
        return float(np.abs(self.host_data()).sum() / max(self.size, 1))

    def l2(self):
        """Root of the mean of squares (SINGA's ``l2``: the L2 norm over sqrt(size))."""
        self._need_data("l2")
        sq = np.square(self.host_data(), dtype=np.float64).sum()
        return float(np.sqrt(sq) / np.sqrt(max(self.size, 1)))

    def to_type(self, dtype):
        """Change the element type in place (SINGA's ``to_type``); returns self."""
        dt = dtypes.as_dtype(dtype)
        if self.data is not None:
            self.data = self.device.put(self.host_data().astype(dt))
        self.dtype = dt
        return self

    def reset_like(self, t):
        """Take the shape, dtype and device of ``t`` (data becomes zeros)."""
        self.shape, self.dtype, self.device = tuple(t.shape), t.dtype, t.device
        self.data = self.device.zeros(self.shape, self.dtype)

    def copy(self):
        """A new Tensor sharing this tensor's data (SINGA's shallow ``copy``)."""
        self._need_data("copy")
        from .tensor import Tensor

        t = Tensor(data=self.data, device=self.device)
        t.data, t.requires_grad = self.data, self.requires_grad  # shared, on any device
        return t

    def deepcopy(self):
        return self.clone()

    def repeat(self, repeats, axis=None):
        """``numpy.repeat`` of the data (SINGA: no gradient; flattened when axis is None)."""
        self._need_data("repeat")
        if isinstance(repeats, (list, tuple)) and axis is None:
            raise ValueError(f"when axis is None, repeats should be an int, got {repeats!r}")
        return self._wrap(np.repeat(self.host_data(), repeats, axis))

    def __getitem__(self, keys):
        """Indexing/slicing of the data (no gradient; concrete tensors only)."""
        self._need_data("__getitem__")
        return self._wrap(np.array(self.host_data()[keys]))

    def __array__(self, dtype=None, copy=None):
        """numpy conversion (``np.asarray(t)``) of a concrete tensor."""
        self._need_data("__array__")
        h = self.host_data()
        a = h if dtype is None else h.astype(dtype, copy=False)
        return a.copy() if copy and a is self.data else a

    def __float__(self):
        """The value of a one-element concrete tensor (``float(loss)``)."""
        self._need_data("__float__")
        h = self.host_data()
        return float(h.reshape(-1)[0]) if self.size == 1 else float(h)

    def __int__(self):
        self._need_data("__int__")
        h = self.host_data()
        return int(h.reshape(-1)[0]) if self.size == 1 else int(h)

    def is_empty(self):
        return self.size == 0

    def is_transpose(self):
        return False

    def contiguous(self):
        return self

    def memsize(self):
        return self.nbytes


def _new(arr, like):
    from .tensor import Tensor

    return Tensor(data=np.ascontiguousarray(arr), device=like.device, requires_grad=False)
