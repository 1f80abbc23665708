"""Tensors of the IR: concrete (holding a numpy array) or symbolic (shape and dtype only).

A :class:`Tensor` made from data is *concrete*; ops called on concrete tensors run at once
(eager mode). A :class:`Placeholder` is a *symbolic* graph input: ops called on it only infer
shapes and record nodes, so a whole training step can be built before any data exists.
"""
from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

from ..errors import ShapeError
from . import bindings, dtypes
from .tensor_methods import CallableInt, SingaTensorMethods

_names = itertools.count()


class TensorSpec(NamedTuple):
    """What shape inference produces for one output: a shape and a dtype, no data."""

    shape: tuple
    dtype: np.dtype


def _as_shape(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError as e:
        raise ShapeError(f"not a shape: {shape!r}") from e
    if any(s < 0 for s in shape):
        raise ShapeError(f"negative dimension in shape {shape}")
    return shape


class Tensor(SingaTensorMethods):
    """An n-dimensional array that ops consume and produce (SINGA's ``tensor.Tensor``).

    Args:
        shape: dimensions; ignored when ``data`` is given.
        device: where it lives; the default device when None.
        dtype: element type (``tensor.float32`` by default).
        data: a numpy array (or anything ``np.asarray`` takes) to hold. Without it the
            tensor is concrete and zero-filled, as in SINGA.
        requires_grad: whether gradients flow through this tensor.
        stores_grad: whether ``autograd.backward`` yields this tensor's gradient
            (parameters). Implies ``requires_grad``.
        creator: the :class:`Node` that produced it, None for leaves.
        name: a readable name; one is generated when None.
    """

    #: counts assignments of ``data`` and in-place writes through this API (copy_from_numpy,
    #: set_value), so that constants derived from a tensor can tell they are stale; writes
    #: by compiled plans (optimizer updates) are not counted here: Model tracks those
    writes = 0

    def __init__(self, shape=(), device: "Device | None" = None, dtype=dtypes.float32, data=None,
                 requires_grad: bool = True, stores_grad: bool = False, creator=None,
                 name: str | None = None):
        self.device = device or bindings.default_device()
        if data is not None:
            if isinstance(data, Tensor):
                data = data.data
            if self.device.kind != "cpu" and self.device.is_array(data):
                self._data = data  # already on the device: shared, as numpy data is
                self.shape, self.dtype = tuple(data.shape), dtypes.as_dtype(data.dtype)
            else:
                arr = np.asarray(data)
                if arr.dtype == np.bool_ or arr.dtype.kind in "iu" and \
                        arr.dtype not in dtypes.INTS:
                    arr = arr.astype(np.int64 if arr.dtype.kind in "iu" else np.bool_)
                dt = dtypes.as_dtype(arr.dtype)
                # ascontiguousarray would make 0-d arrays 1-d
                self.data = arr.astype(dt, order="C", copy=False)
                self.shape = arr.shape
                self.dtype = dt
        else:
            self.shape = _as_shape(shape)
            self.dtype = dtypes.as_dtype(dtype)
            self.data = self.device.zeros(self.shape, self.dtype)
        self.creator = creator
        self.stores_grad = bool(stores_grad)
        self.requires_grad = bool(requires_grad) or self.stores_grad
        self.name = name or f"t{next(_names)}"

    @classmethod
    def symbolic(cls, shape, dtype, device=None, creator=None, requires_grad=False, name=None):
        """A tensor with a shape and dtype but no data: what ops produce in graph mode."""
        t = cls.__new__(cls)
        t.device = device or bindings.default_device()
        t.shape = _as_shape(shape)
        t.dtype = dtypes.as_dtype(dtype)
        t._data = None
        t.creator = creator
        t.stores_grad = False
        t.requires_grad = requires_grad
        t.name = name or f"t{next(_names)}"
        return t

    @classmethod
    def holding(cls, array) -> "Tensor":
        """``Tensor(data=array, requires_grad=False)`` for a C-ordered numpy array of a
        tensor dtype on a CPU default device, holding ``array`` itself: what a plan's
        results are. The constructor's conversions and checks, skipped here, took 28 us of a
        0.8 ms inference call (mnasnet0_5, batch 2), its code gone cold from the cache
        while the kernels ran. Anything else goes through the constructor."""
        device = bindings.default_device()
        if device.kind != "cpu" or type(array) is not np.ndarray or \
                array.dtype not in dtypes.SUPPORTED or not array.flags.c_contiguous:
            return cls(data=array, requires_grad=False)
        t = cls.__new__(cls)
        t.device, t._data, t.writes = device, array, 1
        t.shape, t.dtype = array.shape, array.dtype
        t.creator, t.stores_grad, t.requires_grad = None, False, False
        t.name = f"t{next(_names)}"
        return t

    # ------------------------------------------------------------------ data
    @property
    def data(self):
        """The values: a numpy array on the CPU, a numba.cuda device array on a GPU, None
        for a symbolic tensor. Host data assigned to a GPU tensor is copied to the GPU."""
        return self._data

    @data.setter
    def data(self, value):
        if value is not None and self.device.kind != "cpu" and \
                not self.device.is_array(value):
            value = self.device.put(value)
        self._data = value
        self.writes += 1

    def host_data(self) -> np.ndarray:
        """The values readable on the host: the data itself on the CPU (no copy), a copy of
        a GPU tensor's data."""
        self._need_data("host_data")
        return self.device.get(self._data)

    # ------------------------------------------------------------------ basic facts
    @property
    def is_concrete(self) -> bool:
        """True when the tensor holds data (eager); False for graph-mode tensors."""
        return self.data is not None

    @property
    def ndim(self) -> int:
        """Number of dimensions (SINGA's ``t.ndim()`` call works too)."""
        return CallableInt(len(self.shape))

    @property
    def size(self) -> int:
        """Number of elements (SINGA's ``t.size()`` call works too)."""
        return CallableInt(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        # math.prod on the int shape: planners ask for this for every tensor (np.prod is slow)
        return math.prod(self.shape) * self.dtype.itemsize

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        kind = "" if self.is_concrete else ", symbolic"
        return f"Tensor(name={self.name!r}, shape={self.shape}, dtype={self.dtype}{kind})"

    # ------------------------------------------------------------------ data access
    def _need_data(self, what):
        if self.data is None:
            raise ValueError(
                f"{what}: tensor {self.name!r} is symbolic (a graph-mode tensor has no data "
                "until the compiled plan runs)")

    def to_numpy(self) -> np.ndarray:
        """A copy of the data as a numpy array."""
        a = self.host_data()
        return a.copy() if a is self._data else a

    def numpy(self) -> np.ndarray:
        return self.to_numpy()

    def copy_from_numpy(self, arr, offset: int = 0) -> None:
        """Overwrite the data in place (shape must match, dtype is converted)."""
        arr = np.asarray(arr)
        if self.data is None:
            self.data = self.device.zeros(self.shape, self.dtype)
        if arr.size != self.size:
            raise ShapeError(f"copy_from_numpy: tensor {self.name!r} has shape {self.shape}, "
                             f"array has shape {arr.shape}")
        self.device.copy(self.data, arr.reshape(self.shape).astype(self.dtype, copy=False))
        self.writes += 1

    def copy_data(self, other: "Tensor") -> None:
        self.copy_from_numpy(other.host_data())

    def set_value(self, v) -> "Tensor":
        """Fill with the scalar ``v``."""
        if self.data is None:
            self.data = self.device.empty(self.shape, self.dtype)
        self.device.fill(self.data, v)
        self.writes += 1
        return self

    def gaussian(self, mean: float, std: float) -> "Tensor":
        """Fill with samples of N(mean, std^2) from the seeded global generator."""
        from ..random import generator

        self.data = generator().normal(mean, std, self.shape).astype(self.dtype)
        return self

    def uniform(self, low: float, high: float) -> "Tensor":
        """Fill with samples of U(low, high) from the seeded global generator."""
        from ..random import generator

        self.data = generator().uniform(low, high, self.shape).astype(self.dtype)
        return self

    def bernoulli(self, p: float) -> "Tensor":
        from ..random import generator

        self.data = (generator().random(self.shape) < p).astype(self.dtype)
        return self

    def clone(self) -> "Tensor":
        """A new tensor with a copy of the data, on the same device."""
        self._need_data("clone")
        return Tensor(data=self.device.duplicate(self.data), device=self.device,
                      requires_grad=self.requires_grad, stores_grad=self.stores_grad)

    def as_type(self, dtype) -> "Tensor":
        return bindings.ops().cast(self, dtype)

    def to_device(self, device: "Device") -> None:
        """Move the data to ``device`` in place (SINGA's ``to_device``)."""
        if device == self.device:
            return
        host = None if self._data is None else self.device.get(self._data)
        self.device = device
        self.data = host

    def to_host(self) -> "Tensor":
        """Move the data to the host CPU in place (SINGA's ``to_host``); returns self."""
        self.to_device(bindings.default_device())
        return self


class Placeholder(Tensor):
    """A symbolic graph input: shape and dtype, no data. Fed when a compiled plan runs."""

    def __init__(self, shape, dtype=dtypes.float32, device: "Device | None" = None,
                 name: str | None = None, requires_grad: bool = False):
        self.device = device or bindings.default_device()
        self.shape = _as_shape(shape)
        self.dtype = dtypes.as_dtype(dtype)
        self._data = None
        self.creator = None
        self.stores_grad = False
        self.requires_grad = requires_grad
        self.name = name or f"input{next(_names)}"

    def __repr__(self):
        return f"Placeholder(name={self.name!r}, shape={self.shape}, dtype={self.dtype})"


PlaceHolder = Placeholder  # the spelling of SINGA issue #696


class Parameter(Tensor):
    """A persistent, trainable tensor: ``requires_grad = stores_grad = True``."""

    def __init__(self, shape=(), device=None, dtype=dtypes.float32, data=None, name=None):
        super().__init__(shape, device, dtype, data, requires_grad=True, stores_grad=True,
                         name=name)
