"""Matrix products: MatMul (batched, optional transposes), AddBias and ONNX's Gemm."""
from __future__ import annotations

import math

from ..errors import ShapeError, UnsupportedOpError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import broadcast_shape, need_float, same_dtype, tiled, vector_block

__all__ = ["MatMul", "AddBias", "Gemm", "matmul", "add_bias", "gemm"]  # MatMulDirect: passes


def _mat(shape, trans):
    return (shape[-1], shape[-2]) if trans else (shape[-2], shape[-1])


class MatMul(Operation):
    """``op(a) @ op(b)`` where op transposes the last two axes when ``trans_a``/``trans_b``.

    Leading (batch) axes broadcast as in numpy. Both operands need at least 2 dimensions.
    """

    def __init__(self, trans_a=False, trans_b=False):
        self.trans_a = bool(trans_a)
        self.trans_b = bool(trans_b)

    def infer(self, a, b):
        if a.ndim < 2 or b.ndim < 2:
            raise ShapeError(f"matmul needs 2-d or higher operands, got {a.shape} and {b.shape}")
        need_float(a, b)
        (m, k), (k2, n) = _mat(a.shape, self.trans_a), _mat(b.shape, self.trans_b)
        if k != k2:
            raise ShapeError(f"cannot multiply {a.shape} by {b.shape}"
                             f"{' (a transposed)' if self.trans_a else ''}"
                             f"{' (b transposed)' if self.trans_b else ''}: "
                             f"inner dimensions {k} and {k2} differ")
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
        return [TensorSpec(batch + (m, n), same_dtype(a, b))]

    def gradient(self, inputs, outputs, dys, needs):
        from .elementwise import sum_to

        a, b = inputs
        dy = dys[0]
        da = db = None
        if needs[0]:
            da = (matmul(b, dy, trans_a=self.trans_b, trans_b=True) if self.trans_a
                  else matmul(dy, b, trans_b=not self.trans_b))
            da = da if da.shape == a.shape else sum_to(da, a.shape)
        if needs[1]:
            db = (matmul(dy, a, trans_a=True, trans_b=self.trans_a) if self.trans_b
                  else matmul(a, dy, trans_a=not self.trans_a))
            db = db if db.shape == b.shape else sum_to(db, b.shape)
        return [da, db]


class MatMulDirect(Operation):
    """``x @ W (+ bias)`` for a constant 2-d ``W`` (``K x N``), computed by tiles of rows by
    output columns held in vector registers. ``W`` is read where it is, ``(K, N)``, or,
    with ``columns`` (``N``), from a copy in blocks of ``B`` columns, ``(ceil(N/B), K,
    B)``, ``B`` the values of a 64-byte vector, the last block filled up with zeros: each
    tile then streams one contiguous run. Made by :mod:`singa_graph.passes.direct` in CPU
    inference plans (from a MatMul by a constant and the Add of a constant bias after it,
    or a Gemm); float32 only (:func:`~singa_graph.ops._util.tiled`); inference only: no
    gradient."""

    differentiable = False

    def __init__(self, bias=False, columns=None):
        self.bias = bool(bias)
        self.columns = None if columns is None else int(columns)

    @staticmethod
    def block(dtype) -> int:
        """``B`` for weights of ``dtype``."""
        return vector_block(dtype)

    @property
    def label(self) -> str:
        return "MatMulDirect+Add" if self.bias else "MatMulDirect"

    def multiply_adds(self, x_shape, w_shape, y_shape) -> int:
        """The multiply-adds of one call (for profiles' GFLOP/s)."""
        return math.prod(y_shape) * x_shape[-1]

    def infer(self, x, w, *bias):
        blocked = self.columns is not None
        k = w.shape[1] if blocked and w.ndim == 3 else w.shape[0]
        if (x.ndim < 2 or w.ndim != 2 + blocked or len(bias) != self.bias
                or x.shape[-1] != k):
            raise ShapeError(f"MatMulDirect takes x (..., K), a "
                             f"{'(N/B, K, B)' if blocked else '(K, N)'} weight"
                             f"{' and a bias' if self.bias else ''}, got {x.shape}, {w.shape}"
                             f" and {len(bias)} more")
        n = self.columns if blocked else w.shape[1]
        if blocked and (w.shape[2] != self.block(w.dtype)
                        or not w.shape[0] * w.shape[2] - w.shape[2] < n <= w.shape[0] * w.shape[2]):
            raise ShapeError(f"MatMulDirect's blocked weight {w.shape} does not hold {n} "
                             f"columns in blocks of {self.block(w.dtype)}")
        if bias and bias[0].shape != (n,):
            raise ShapeError(f"bias {bias[0].shape} does not match {n} columns")
        need_float(x, w)
        dtype = same_dtype(x, w, *bias)
        if not tiled(dtype):
            raise UnsupportedOpError(f"MatMulDirect computes float32, not {dtype}")
        return [TensorSpec(tuple(x.shape[:-1]) + (n,), dtype)]


class AddBias(Operation):
    """Add a 1-d bias along dimension ``dim`` of ``x`` (dim 1 = features or channels)."""

    inplace = {0: 0}

    def __init__(self, dim=1):
        self.dim = int(dim)

    def infer(self, x, b):
        if b.ndim != 1 or x.ndim <= self.dim or x.shape[self.dim] != b.shape[0]:
            raise ShapeError(f"bias of shape {b.shape} does not match dimension {self.dim} "
                             f"of {x.shape}")
        return [TensorSpec(x.shape, same_dtype(x, b))]

    def gradient(self, inputs, outputs, dys, needs):
        from .reduce import sum

        x = inputs[0]
        axes = tuple(i for i in range(x.ndim) if i != self.dim)
        return [dys[0], sum(dys[0], axes) if needs[1] else None]


class Gemm(Operation):
    """ONNX Gemm: ``alpha * op(A) @ op(B) + beta * C`` for 2-d A and B (C broadcasts)."""

    def __init__(self, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
        self.alpha, self.beta = float(alpha), float(beta)
        self.trans_a, self.trans_b = bool(trans_a), bool(trans_b)

    def infer(self, a, b, c=None):
        if a.ndim != 2 or b.ndim != 2:
            raise ShapeError(f"gemm needs 2-d A and B, got {a.shape} and {b.shape}")
        (y,) = MatMul(self.trans_a, self.trans_b).infer(a, b)
        if c is not None and broadcast_shape(y.shape, c.shape) != y.shape:
            raise ShapeError(f"C of shape {c.shape} does not broadcast to {y.shape}")
        return [y]

    def gradient(self, inputs, outputs, dys, needs):
        from .elementwise import mul, sum_to

        dy = dys[0]
        grads = MatMul(self.trans_a, self.trans_b).gradient(inputs[:2], outputs, [dy], needs[:2])
        grads = [None if g is None else (g if self.alpha == 1.0 else mul(g, self.alpha))
                 for g in grads]
        if len(inputs) == 3:
            c = inputs[2]
            dc = None
            if needs[2]:
                dc = dy if self.beta == 1.0 else mul(dy, self.beta)
                dc = dc if dc.shape == c.shape else sum_to(dc, c.shape)
            grads.append(dc)
        return grads


def matmul(a, b, trans_a=False, trans_b=False):
    """Matrix product of the last two axes, batch axes broadcast."""
    return MatMul(trans_a, trans_b)(a, b)


def add_bias(x, b, axis=0):
    """SINGA's ``add_bias``: ``axis=0`` adds ``b`` to every row of a matrix (``b`` runs along
    columns), ``axis=1`` to every column."""
    return AddBias(1 if axis == 0 else 0)(x, b)


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    op = Gemm(alpha, beta, trans_a, trans_b)
    return op(a, b) if c is None else op(a, b, c)
