"""Direct convolutions and products for CPU inference plans: convs over small planes become
:class:`~singa_graph.ops.conv_tiles.Conv2dDirect`, whose kernel (runtime/kernels/cpu/
conv_direct.py) keeps output tiles in vector registers instead of running im2col and a
GEMM, and products by a constant weight over few rows become
:class:`~singa_graph.ops.linalg.MatMulDirect` (the same tiles, matmul_direct.py), taking
the Add of a constant bias after them.

The convs' weights are held in blocks of output channels, ``(O/B, kh, kw, C, B)``: a
folded BatchNorm's weight is held so at no cost, any other weight gets a plan-owned
permuted copy (counted in ``memory_report()``'s ``folded_bytes``, refreshed with the
folds when the parameters change). A grouped conv's weight (:class:`Spread`) also puts
each output channel's weights among the channels that its block of ``B`` reads, zeros
elsewhere: RegNet's convs of 8 channels a group are 16-channel dense blocks with half
their terms zero, run at the tiles' speed, where the other kernel ran a GEMM of 8 rows a
group and sample. Activations stay NCHW, so nothing around the conv
changes. The sums are taken in another order than the
im2col kernel's (one fused multiply-add per term): results differ in the last bits, as
for any change of kernel; tests/passes/test_direct.py bounds the difference.

Which convs (:meth:`Conv2dDirect.wins <singa_graph.ops.conv_tiles.Conv2dDirect.wins>`, which the
Conv2d kernel of training and eager runs asks too): measured at batch 2 on two threads
(2026-11-27), against the kernel that runs them otherwise, e.g. densenet121's 128 -> 32
3x3 convs at 2x2, 4x4 and 8x8 19 -> 7.5, 30 -> 17 and 82 -> 55 us, squeezenet's 64 -> 256
at 3x3 48 -> 37, ResNet-18's 128 -> 256 stride 2 147 -> 100. Stems (a few input channels)
are left to the plain Conv2d, whose kernel has output-row tiles for them (conv_planes.py).
"""
from __future__ import annotations

import numpy as np

from .. import host
from ..ops._util import tiled
from ..ops.conv import Conv2d
from ..ops.conv_tiles import Conv2dDirect
from ..ops.linalg import Gemm, MatMul, MatMulDirect
from .inference import _is_leaf_with_data, _node_like, _Uses
from .held_weights import (BLOCKED, STREAM_ROWS, STREAM_WEIGHT_BYTES,  # noqa: F401
                           BlockedWeights, Permuted, PermutedWeights, Spread)

__all__ = ["direct_convs", "direct_matmuls", "wins"]

#: which convs go direct (the measurements are beside its constants in ops/conv_tiles.py)
wins = Conv2dDirect.wins


def direct_convs(graph, weight_copies: bool = True) -> int:
    """Make the Conv2d nodes of the inference graph ``graph`` that :func:`wins` chooses
    Conv2dDirect (in place); returns how many. Without ``weight_copies``, only those
    whose blocked weight costs nothing (a folded BatchNorm's)."""
    weights = BlockedWeights(graph)
    done = 0
    for k, n in enumerate(graph.nodes):
        if type(n.op) is not Conv2d or len(n.inputs) < 2:
            continue
        x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
        if not (_is_leaf_with_data(w) and len(x.shape) == 4
                and wins(n.op, x.shape, w.shape, y.shape, y.dtype)):
            continue
        if not (weight_copies or weights.free(w, n.op.groups)):
            continue
        ins = list(n.inputs)
        ins[1] = weights(w, n.op.groups)
        graph.nodes[k] = _node_like(n, n, Conv2dDirect.of(n.op, w.shape[0]), ins, n.outputs)
        done += 1
    weights.commit()
    return done


# ---------------------------------------------------------------------- products
#: rows (the product of ``x``'s leading axes) up to which products by a constant weight go
#: direct. Two threads (2026-11-27), against the MatMul kernel's BLAS GEMM: 8x3072x768 671
#: -> 256 us, 32x384x1536 238 -> 170, 128x192x768 203 -> 171, 512x384x96 185 -> 169,
#: 2048x1536x384 11.6 -> 11.2 ms, 4096x96x384 1.47 -> 1.41 ms (beyond, untried: BLAS
#: blocks long rows of ``x`` for its caches, the tiles do not)
MAX_ROWS = 4096
#: weights of fewer values keep the MatMul kernel (BLAS, and a bias as its own Add), by the
#: target's vector bytes (singa_graph.host). With AVX-512 the tiles' fixed costs showed
#: over short rows (2-core Intel Xeon: the small ViT's 130 x 64 x 128 with its bias, 15
#: against 20 us); with AVX2 the tiles won from 64 x 64 weights: paired whole-model runs
#: on a 2-core AMD EPYC (2026-11-29), 2^12 against 2^16, small ViT 0.92/0.93, small Swin
#: 0.93/0.96, convnext_tiny 1.00
MIN_WEIGHT_VALUES = {64: 1 << 16, 32: 1 << 12, 16: 1 << 12}
#: ... but over at least this many rows the tiles win with AVX-512 too, from weights of
#: :data:`MANY_ROWS_MIN_WEIGHT_VALUES` values: one thread, against the MatMul kernel and
#: its bias Add, one-node plans interleaved call by call (Intel Xeon, 2026-12-02): 512 x
#: 96 x 384 (ConvNeXt's first stage at 64x64, batch 2) 553 -> 470 us, 512 x 384 x 96 534
#: -> 496, 256 x 96 x 384 309 -> 264; two threads 0.80-0.88 of the time
MANY_ROWS = 256
MANY_ROWS_MIN_WEIGHT_VALUES = 1 << 12
#: an ONNX Gemm's ``(N, K)`` weight of this many values goes direct over any rows: the
#: Gemm kernel (BLAS on the transposed weight, then the bias) lost to the tiles on a
#: blocked copy even over a ViT's 130 rows (two threads, one-node plans interleaved call by
#: call, 2026-12-02: 130 x 64 x 64 32 -> 27 us, 130 x 128 x 64 48 -> 35, 130 x 64 x 192 64
#: -> 38)
GEMM_MIN_WEIGHT_VALUES = 1 << 12


def _big_enough(values, rows, min_values, gemm=False) -> bool:
    """Whether a weight of ``values`` values over ``rows`` rows is worth the tiles
    (``gemm``: an ONNX Gemm's transposed weight)."""
    return (values >= min_values or (gemm and values >= GEMM_MIN_WEIGHT_VALUES)
            or (rows >= MANY_ROWS and values >= MANY_ROWS_MIN_WEIGHT_VALUES))


def _product(n):
    """``(x, w, transposed, bias)`` of a product by a 2-d weight that MatMulDirect can
    take (``transposed``: ``w`` is ``(N, K)``; ``bias``: a Gemm's ``C``, or None), else
    None: a MatMul without transposes, or an ONNX Gemm ``x @ op(w) + C`` (the classifier
    of most exported CNNs: ``transB=1``, ``alpha = beta = 1``, ``C`` of ``N`` values)."""
    if type(n.op) is MatMul and not (n.op.trans_a or n.op.trans_b):
        return n.inputs[0], n.inputs[1], False, None
    if type(n.op) is Gemm and not n.op.trans_a and n.op.alpha == 1.0:
        w = n.inputs[1]
        bias = n.inputs[2] if len(n.inputs) == 3 else None
        cols = w.shape[0] if n.op.trans_b else w.shape[1]
        if bias is not None and not (n.op.beta == 1.0 and _is_leaf_with_data(bias)
                                     and tuple(bias.shape) == (cols,)
                                     and bias.dtype == n.outputs[0].dtype):
            return None
        return n.inputs[0], w, n.op.trans_b, bias
    return None


def direct_matmuls(graph, weight_copies: bool = True) -> int:
    """Make the products of the inference graph ``graph`` by a constant 2-d weight (of at
    least :data:`MIN_WEIGHT_VALUES` values for the host, or :data:`MANY_ROWS_MIN_WEIGHT_VALUES`
    over :data:`MANY_ROWS` rows or more) over at most :data:`MAX_ROWS` rows
    MatMulDirect (in place; returns how many): MatMuls, with the Add of a constant bias
    that is their output's only reader, and Gemms with their ``C``. A Gemm's ``(N, K)``
    weight (``transB=1``) is read through a plan-owned copy in blocks of columns,
    ``(N/B, K, B)``, each tile's weights one contiguous run; a MatMul's is read in place.
    Measured on the 2-core Intel Xeon (2026-11-28), batch 2, weight in the last-level
    cache, against the Gemm kernel's dot products by weight rows: 1280 -> 1000
    (mobilenet_v2's classifier) 173-187 against 208-232 us through a ``(K, N)`` copy,
    512 -> 1000 (resnet18's) 55 against 140. Without ``weight_copies``, only the products
    that read their weight in place."""
    uses = _Uses(graph)
    min_values = MIN_WEIGHT_VALUES[host.vector_bytes()]  # one of host.VECTOR_WIDTHS
    blocked = {}  # dtype -> PermutedWeights of (N, K) weights
    columns = PermutedWeights(graph, copy=ColumnBlocks)  # (K, N) weights over few rows
    drop, replace = set(), {}
    for n in graph.nodes:
        product = _product(n)
        if product is None:
            continue
        x, w, trans_w, bias = product
        (y,) = n.outputs
        rows = int(np.prod(x.shape[:-1]))
        if not (_is_leaf_with_data(w) and len(w.shape) == 2 and len(x.shape) >= 2
                and tiled(y.dtype) and x.dtype == w.dtype
                and rows <= MAX_ROWS
                and _big_enough(w.shape[0] * w.shape[1], rows, min_values, trans_w)):
            continue
        cols = w.shape[0] if trans_w else w.shape[1]
        streamed = rows <= STREAM_ROWS and w.nbytes >= STREAM_WEIGHT_BYTES
        if not weight_copies and (trans_w or streamed):
            continue  # (before the bias Add below is taken in)
        ins, out = [x], y
        add = uses.only(y) if bias is None and type(n.op) is MatMul else None
        if bias is not None:
            ins.append(bias)
        elif add is not None and add.type == "Add" and add.id not in drop:
            other = [t for t in add.inputs if t is not y]
            if (len(other) == 1 and _is_leaf_with_data(other[0])
                    and tuple(other[0].shape) == (cols,) and other[0].dtype == y.dtype
                    and add.outputs[0].shape == y.shape):
                ins.append(other[0])
                out = add.outputs[0]
                drop.add(add.id)
        if trans_w:
            dt = np.dtype(w.dtype)
            if dt not in blocked:  # (N, K) -> (N/B, B, K) -> (N/B, K, B)
                blocked[dt] = PermutedWeights(graph, (0, 2, 1), MatMulDirect.block(dt))
            ins.insert(1, blocked[dt](w))
        elif streamed:
            ins.insert(1, columns(w))
        else:
            ins.insert(1, w)
        op = MatMulDirect(bias=len(ins) == 3,
                          columns=cols if trans_w or streamed else None)
        replace[n.id] = _node_like(n, n, op, ins, [out])
    graph.nodes = [replace.get(n.id, n) for n in graph.nodes if n.id not in drop]
    for made in (*blocked.values(), columns):
        made.commit()
    return len(replace)


class ColumnBlocks(Permuted):
    """A plan-owned copy of a MatMul's ``(K, N)`` weight in blocks of ``B`` columns,
    ``(ceil(N/B), K, B)`` (MatMulDirect's blocked layout)."""

    def __init__(self, source):
        super().__init__(source, (0, 2, 1), MatMulDirect.block(source.dtype))

    def _values(self):
        return (self.sources[0].host_data().T,)
