"""SINGA's ``tensor`` module.

There is one Tensor class, :class:`singa_graph.ir.tensor.Tensor`: it holds a numpy array
(concrete, eager) or only a shape and dtype (symbolic, graph mode). This module re-exports it
under SINGA's names (its SINGA methods are ordinary methods, from
:class:`~singa_graph.ir.tensor_methods.SingaTensorMethods`) and provides SINGA's module-level
functions::

    from singa_graph import tensor
    tx = tensor.Tensor((16, 3, 32, 32), dev)           # zero-filled, float32
    ty = tensor.Tensor((16,), dev, tensor.int32)
    tx.copy_from_numpy(x)
    w = tensor.Tensor(shape=(2, 3), requires_grad=True, stores_grad=True)
    w.gaussian(0.0, 0.1)
    a = tensor.to_numpy(tensor.from_numpy(np.ones((2, 2))))

Functions that have an op (``reshape``, ``exp``, ``sum``, ``mult``, ...) call it, so they work
on symbolic tensors too; the rest (comparisons, ``axpy``, random fills) need data.
"""
from __future__ import annotations

from functools import reduce

import numpy as np

from . import ops as _ops
from .errors import ShapeError
from .ir import dtypes as _dtypes
from .ir.tensor import Parameter, Placeholder, PlaceHolder, Tensor  # noqa: F401
from .runtime.device import get_default_device

float16 = _dtypes.float16
float32 = _dtypes.float32
float64 = _dtypes.float64
int32 = _dtypes.int32
int64 = _dtypes.int64

__all__ = ["Tensor", "Placeholder", "PlaceHolder", "Parameter", "float16", "float32", "float64",
           "int32", "int64", "from_numpy", "to_numpy", "to_host", "zeros", "ones", "zeros_like",
           "ones_like", "random", "gaussian", "uniform", "bernoulli", "reshape", "transpose",
           "sum", "average", "abs", "exp", "log", "sqrt", "square", "sign", "tanh", "sigmoid",
           "relu", "softmax", "pow", "add", "sub", "eltwise_mult", "div", "mult", "axpy",
           "concatenate", "lt", "le", "gt", "ge", "product", "sizeof", "copy_data_to_from",
           "copy_from_numpy", "from_raw_tensor", "from_raw_tensors", "ceil", "eq", "repeat",
           "tensordot", "einsum", "add_column", "add_row", "sum_columns", "sum_rows", "contiguous"]


# ---------------------------------------------------------------------- helpers
def _need(t, what):
    if not isinstance(t, Tensor):
        raise TypeError(f"{what}: expected a Tensor, got {type(t).__name__}")
    if t.data is None:
        raise ValueError(f"{what}: tensor {t.name!r} is symbolic and holds no data")


# ---------------------------------------------------------------------- creation
def from_numpy(np_array, dev=None) -> Tensor:
    """A new Tensor with the shape, dtype and values of ``np_array``.

    As in SINGA, float64 becomes float32 and int64 becomes int32.
    """
    a = np.asarray(np_array)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    elif a.dtype.kind in "iu" or a.dtype == np.bool_:
        a = a.astype(np.int32)
    return Tensor(data=a, device=dev)


def from_raw_tensor(t) -> Tensor:
    """A Tensor holding ``t``'s data (no creator): SINGA wraps a raw CTensor this way, e.g.
    the gradients that ``y.creator.backward(dy)`` returns. Accepts Tensors and arrays."""
    if isinstance(t, Tensor):
        _need(t, "from_raw_tensor")
        out = Tensor(data=t.data, device=t.device, requires_grad=False)
        out.data = t.data  # share, as SINGA shares the CTensor
        return out
    return Tensor(data=np.asarray(t), requires_grad=False)


def from_raw_tensors(tt) -> list:
    """:func:`from_raw_tensor` of each element."""
    return [from_raw_tensor(t) for t in tt]


def to_numpy(t: Tensor) -> np.ndarray:
    """A copy of ``t``'s data as a numpy array (``t`` must be concrete)."""
    _need(t, "to_numpy")
    return t.to_numpy()


def to_host(t: Tensor) -> Tensor:
    """A copy of ``t`` on the host (CPU) device."""
    _need(t, "to_host")
    return Tensor(data=t.to_numpy(), device=get_default_device(),
                  requires_grad=t.requires_grad, stores_grad=t.stores_grad)


def copy_from_numpy(data: Tensor, np_array) -> None:
    """Copy ``np_array`` into tensor ``data`` (SINGA's module-level form)."""
    data.copy_from_numpy(np_array)


def zeros(shape, device=None, dtype=float32) -> Tensor:
    """A zero-filled tensor."""
    return Tensor(shape, device, dtype)


def ones(shape, device=None, dtype=float32) -> Tensor:
    """A tensor filled with ones."""
    return Tensor(shape, device, dtype).set_value(1)


def zeros_like(t: Tensor) -> Tensor:
    """Zeros with ``t``'s shape, device and dtype."""
    return Tensor(t.shape, t.device, t.dtype)


def ones_like(t: Tensor) -> Tensor:
    """Ones with ``t``'s shape, device and dtype."""
    return Tensor(t.shape, t.device, t.dtype).set_value(1)


def random(shape, device=None) -> Tensor:
    """A tensor of samples from U(0, 1) (seeded by :func:`singa_graph.random.seed`)."""
    return Tensor(shape, device).uniform(0.0, 1.0)


def _fill_args(name, a, b, t):
    # SINGA's order is (a, b, t); (t, a, b) is accepted too.
    if isinstance(a, Tensor):
        a, b, t = b, t, a
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a Tensor to fill")
    return a, b, t


def gaussian(mean, std, t) -> Tensor:
    """Fill ``t`` in place with N(mean, std^2) samples; returns ``t``. SINGA's argument order
    is ``gaussian(mean, std, t)``; ``gaussian(t, mean, std)`` also works."""
    mean, std, t = _fill_args("gaussian", mean, std, t)
    return t.gaussian(mean, std)


def uniform(low, high, t) -> Tensor:
    """Fill ``t`` in place with U(low, high) samples; returns ``t`` (either argument order)."""
    low, high, t = _fill_args("uniform", low, high, t)
    return t.uniform(low, high)


def bernoulli(p, t) -> Tensor:
    """Fill ``t`` in place with 1 (probability ``p``) or 0; returns ``t``."""
    if isinstance(p, Tensor):
        p, t = t, p
    return t.bernoulli(p)


# ---------------------------------------------------------------------- math (ops)
def reshape(t, shape):
    """``t`` viewed with a new shape."""
    return _ops.reshape(t, shape)


def transpose(t, axes=None):
    """Permute the axes (reverse them when ``axes`` is None)."""
    return _ops.transpose(t, axes)


def sum(t, axis=None, out=None):
    """Sum over ``axis`` (all elements when None)."""
    y = _ops.sum(t, axis)
    return _into(out, y)


def average(t, axis=None):
    """Mean over ``axis``; over all elements (``axis`` None) of a concrete tensor it is a
    Python float, as SINGA."""
    if axis is None and t.data is not None:
        return float(np.mean(t.host_data(), dtype=np.float64))
    return _ops.mean(t, axis)


def _into(out, y):
    if out is None:
        return y
    out.copy_from(y)
    return out


# the ops themselves, under SINGA's tensor-module names
abs, exp, log, sqrt, sign = _ops.abs, _ops.exp, _ops.log, _ops.sqrt, _ops.sign
tanh, sigmoid, relu = _ops.tanh, _ops.sigmoid, _ops.relu


def square(t):
    return _ops.mul(t, t)


def softmax(t, out=None):
    """Softmax over the last axis of a 2-d tensor (axis 1)."""
    return _into(out, _ops.softmax(t))


def pow(t, x, out=None):
    return _into(out, _ops.pow(t, x))


def add(lhs, rhs, ret=None):
    return _into(ret, _ops.add(lhs, rhs))


def sub(lhs, rhs, ret=None):
    return _into(ret, _ops.sub(lhs, rhs))


def eltwise_mult(lhs, rhs, ret=None):
    return _into(ret, _ops.mul(lhs, rhs))


def div(lhs, rhs, ret=None):
    return _into(ret, _ops.div(lhs, rhs))


def mult(A, B, C=None, alpha=1.0, beta=0.0):
    """Matrix product ``alpha * A @ B + beta * C``; with C given, C is overwritten (SINGA)."""
    if C is None:
        y = _ops.matmul(A, B)
        return y if alpha == 1.0 else _ops.mul(y, alpha)
    y = _ops.gemm(A, B, C, alpha, beta)
    C.copy_from(y)
    return C


def concatenate(tensors, axis):
    """Join tensors along ``axis``."""
    return _ops.cat(list(tensors), axis)


def axpy(alpha, x, y):
    """``y += alpha * x`` in place on the data; returns ``y``."""
    _need(x, "axpy")
    _need(y, "axpy")
    y.copy_from_numpy(y.host_data() + np.asarray(alpha * x.host_data(), dtype=y.dtype))
    return y


ceil = _ops.ceil


def contiguous(t):
    """``t`` itself: tensors here are always contiguous."""
    return t


def eq(t, x):
    """Elementwise ``t == x`` as 0/1 in ``t``'s dtype (``x`` a Tensor or a number)."""
    return t._eq(x)


def repeat(t, repeats, axis=None):
    """``numpy.repeat`` of the data (flattened when ``axis`` is None); no gradient."""
    return t.repeat(repeats, axis)


def tensordot(A, B, axes=2):
    """``numpy.tensordot`` built from Transpose, Reshape and MatMul (so it has a gradient
    and works in graph mode). ``axes``: an int (last of A with first of B) or two lists."""
    if isinstance(axes, (int, np.integer)):
        axes_a, axes_b = list(range(A.ndim - axes, A.ndim)), list(range(axes))
    else:
        axes_a, axes_b = ([a] if np.isscalar(a) else list(a) for a in axes)
    axes_a = [a % A.ndim for a in axes_a]
    axes_b = [b % B.ndim for b in axes_b]
    if [A.shape[a] for a in axes_a] != [B.shape[b] for b in axes_b]:
        raise ShapeError(f"tensordot: axes {axes_a} of {A.shape} and {axes_b} of {B.shape} "
                         "differ in size")
    free_a = [a for a in range(A.ndim) if a not in axes_a]
    free_b = [b for b in range(B.ndim) if b not in axes_b]
    k = product(A.shape[a] for a in axes_a)
    a2 = _ops.reshape(_ops.transpose(A, free_a + axes_a), (-1, k))
    b2 = _ops.reshape(_ops.transpose(B, axes_b + free_b), (k, -1))
    out = [A.shape[a] for a in free_a] + [B.shape[b] for b in free_b]
    return _ops.reshape(_ops.matmul(a2, b2), out)


def einsum(ops, *args):
    """``numpy.einsum`` on the data of concrete tensors (SINGA's two-operand einsum); no
    gradient."""
    for t in args:
        _need(t, "einsum")
    return Tensor(data=np.einsum(ops, *(t.host_data() for t in args)), device=args[0].device,
                  requires_grad=False)


def add_column(alpha, v, beta, M):
    """``M = alpha * v + beta * M`` for each column of the 2-d ``M`` (in place); returns M."""
    _need(M, "add_column")
    M.copy_from_numpy(alpha * v.host_data().reshape(-1, 1) + beta * M.host_data())
    return M


def add_row(alpha, v, beta, M):
    """``M = alpha * v + beta * M`` for each row of the 2-d ``M`` (in place); returns M."""
    _need(M, "add_row")
    M.copy_from_numpy(alpha * v.host_data().reshape(1, -1) + beta * M.host_data())
    return M


def sum_columns(M):
    """The sum of the columns of a 2-d tensor, shape (rows, 1)."""
    return _ops.sum(M, 1, True)


def sum_rows(M):
    """The sum of the rows of a 2-d tensor, shape (1, columns)."""
    return _ops.sum(M, 0, True)


def lt(t, x):
    return t < x


def le(t, x):
    return t <= x


def gt(t, x):
    return t > x


def ge(t, x):
    return t >= x


def product(shape) -> int:
    """The number of elements of ``shape``."""
    return int(reduce(lambda a, b: a * b, shape, 1))


def sizeof(dtype) -> int:
    """Bytes per element of ``dtype``."""
    return _dtypes.as_dtype(dtype).itemsize


def copy_data_to_from(dst, src, size, dst_offset=0, src_offset=0):
    """Copy ``size`` elements of ``src`` (from ``src_offset``) into ``dst`` (at ``dst_offset``),
    both seen as flat arrays."""
    _need(dst, "copy_data_to_from")
    _need(src, "copy_data_to_from")
    if dst_offset + size > dst.size or src_offset + size > src.size:
        raise ShapeError(f"copy_data_to_from: {size} elements do not fit "
                         f"(dst size {dst.size}, src size {src.size})")
    host = dst.host_data()  # the data itself on the CPU, a copy of a GPU tensor's
    host.reshape(-1)[dst_offset:dst_offset + size] = \
        src.host_data().reshape(-1)[src_offset:src_offset + size]
    if host is not dst.data:
        dst.copy_from_numpy(host)

