"""Helpers shared by op definitions: broadcasting, axis normalisation, dtype checks."""
from __future__ import annotations

import numpy as np

from .. import host
from ..errors import DTypeError, ShapeError
from ..ir.dtypes import NARROW_FLOATS, is_float


def vector_block(dtype) -> int:
    """Values of ``dtype`` in one vector register of the CPU (64 bytes with AVX-512, 32
    with AVX2; :mod:`singa_graph.host`): the block of output channels or columns in which
    the CPU register tiles' weights are held (Conv2dDirect, MatMulDirect)."""
    return host.vector_bytes() // np.dtype(dtype).itemsize


def tiled(dtype) -> bool:
    """Whether values of ``dtype`` may run on the CPU's register-tile kernels (direct convs
    and GEMMs, the plane tiles, pointwise dots, channels-last chains). float32 only: those
    kernels exist for speed, while a float64 model is run for its accuracy (gradient
    checks, reference runs), which the loop and im2col + GEMM kernels give it as well
    (oneDNN has no float64 convs at all). Each dtype a tile kernel takes is also one more
    long Numba compile (about 4 minutes of a cold test run for float64)."""
    return np.dtype(dtype) == np.float32


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """numpy's broadcasting rule, raising ShapeError that names both shapes."""
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise ShapeError(f"shapes {a} and {b} do not broadcast") from None


def norm_axes(axes, ndim: int) -> tuple | None:
    """``None`` stays None (all axes); ints and negative ints become a sorted tuple."""
    if axes is None:
        return None
    if isinstance(axes, (int, np.integer)):
        axes = (int(axes),)
    out = []
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise ShapeError(f"axis {a} out of range for a {ndim}-d tensor")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {tuple(axes)}")
    return tuple(sorted(out))


def same_dtype(*xs) -> np.dtype:
    dts = {x.dtype for x in xs}
    if len(dts) != 1:
        raise DTypeError("dtypes differ: " + ", ".join(f"{x.name}:{x.dtype}" for x in xs))
    return xs[0].dtype


def need_float(*xs, narrow=False) -> None:
    """Refuse non-float tensors; ``narrow`` also admits bfloat16/float8/float4, for ops whose
    CPU kernels compute them through float32 (the elementwise formulas)."""
    for x in xs:
        if not (is_float(x.dtype) or narrow and x.dtype in NARROW_FLOATS):
            raise DTypeError(f"{x.name} has dtype {x.dtype}; a floating dtype is required")
