"""A cost model of nodes from their FLOPs and the bytes they move.

Rematerialisation trades memory for time, so it needs to know what a node costs to run
again. Without timing anything, a node's time is estimated as the larger of its arithmetic
time and its memory time (a roofline)::

    seconds = max(flops / FLOP_RATE, bytes_moved / BYTE_RATE)

FLOPs are exact for the GEMM-like ops (convolutions and their gradients, matmuls, attention)
and one per output element for everything else; bytes moved are the bytes of the node's
inputs and outputs. The rates are those of one CPU core's order of magnitude: only their
ratio matters to the choices (a convolution is worth keeping, a ReLU is cheap to redo).
"""
from __future__ import annotations

import math

FLOP_RATE = 2.0e10  # FLOP/s
BYTE_RATE = 1.0e10  # bytes/s


def _numel(shape) -> int:
    return int(math.prod(shape))


def flops(node) -> float:
    """Floating-point operations of ``node``: multiply-adds x 2 for GEMM-like ops, one per
    output element for the others."""
    from ..runtime.plan import flops as gemm_flops

    f = gemm_flops(node)
    if f:
        return f
    t = node.type
    if t in ("ScaledDotProductAttention", "ScaledDotProductAttentionGrad"):
        grad = t.endswith("Grad")
        q, k = node.inputs[1 if grad else 0].shape, node.inputs[2 if grad else 1].shape
        keys = k[-2] if node.op.layout == "bhsd" else k[1]
        f = 4.0 * _numel(q) * keys  # q k^T and p v, two multiply-adds per pair
        return 2.0 * f if grad else f
    return float(sum(_numel(o.shape) for o in node.outputs))


def bytes_moved(node) -> int:
    """Bytes ``node`` reads and writes (each input and output once)."""
    return sum(t.nbytes for t in node.inputs) + sum(t.nbytes for t in node.outputs)


def seconds(node) -> float:
    """The roofline estimate of ``node``'s run time (see the module docstring)."""
    return max(flops(node) / FLOP_RATE, bytes_moved(node) / BYTE_RATE)


def step_seconds(nodes) -> float:
    """The estimated time of running ``nodes`` once each."""
    return sum(seconds(n) for n in nodes)
