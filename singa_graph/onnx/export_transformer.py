"""singa_graph -> ONNX: LayerNorm and scaled dot-product attention.

LayerNorm is ONNX's LayerNormalization (opset 17 on). Its saved mean and reciprocal
standard deviation are written only where the exported graph reads them; ONNX keeps the
normalized axes as ones in their shapes, ours drops them, so a Reshape follows.

Attention is ONNX's ``Attention`` op from opset 23. Our ``bshd`` layout (the one
MultiHeadAttention uses) goes in as ONNX's 3-d ``(batch, seq, heads * dim)`` form through a
free Reshape, with ``q_num_heads``/``kv_num_heads`` set, so no transposes are written.
Below opset 23 the op is written as its composition: MatMul of q and k transposed, Mul by
the scale, the mask added (a floating mask) or applied with Where (a boolean one), a
constant ``-inf`` upper triangle added for ``causal``, Softmax over the last axis, MatMul by v.
The saved logsumexp (only where read) is ReduceLogSumExp of the same masked scores.
A query whose keys are all masked gives NaN here and in the composition, zeros in ONNX's
Attention.
"""
from __future__ import annotations

import numpy as np

from .export_ops import shape_const
from .registry import exporter


def _reshape(ctx, src, like, shape):
    """A fresh name for ``src`` reshaped to ``shape`` (``like`` names the batch axis)."""
    dst = ctx.fresh(like)
    ctx.emit("Reshape", [src, shape_const(ctx, like, shape)], [dst])
    return dst


@exporter("LayerNorm")
def layer_norm(ctx, node):
    op = node.op
    x = node.inputs[0]
    y, mean, rstd = node.outputs
    outs = [ctx.name(y)]
    if ctx.is_read(mean) or ctx.is_read(rstd):
        outs += [ctx.fresh(mean), ctx.fresh(rstd)]
    ctx.emit("LayerNormalization", node.inputs, outs, axis=op.axis, epsilon=op.eps)
    for t, src in zip((mean, rstd), outs[1:]):
        if ctx.is_read(t):
            ctx.emit("Reshape", [src, shape_const(ctx, x, t.shape)], [t])


def _causal_bias(ctx, sq, sk, dtype):
    """``(sq, sk)`` constant: 0 where key ``j <= i``, ``-inf`` above (top-left aligned)."""
    keep = np.tril(np.ones((sq, sk), bool))
    return ctx.const(np.where(keep, 0, -np.inf).astype(dtype), "causal_bias")


def _bhsd(ctx, t, layout, perm):
    """``t`` in ``(batch, heads, seq, dim)`` order permuted by ``perm`` of bhsd axes."""
    if layout == "bshd":  # bshd -> bhsd is (0, 2, 1, 3); compose with perm
        perm = [(0, 2, 1, 3)[p] for p in perm]
    if list(perm) == [0, 1, 2, 3]:
        return ctx.name(t)
    dst = ctx.fresh(t)
    ctx.emit("Transpose", [t], [dst], perm=list(perm))
    return dst


def _seqs(op, q, k):
    return (q.shape[1], k.shape[1]) if op.layout == "bshd" else (q.shape[2], k.shape[2])


def _scores(ctx, node):
    """The name of the scaled, masked scores ``(batch, heads, seq_q, seq_k)``."""
    op = node.op
    q, k = node.inputs[:2]
    mask = node.inputs[3] if len(node.inputs) > 3 else None
    like, dt = node.outputs[1], q.dtype
    raw, scores = ctx.fresh(like), ctx.fresh(like)
    ctx.emit("MatMul", [_bhsd(ctx, q, op.layout, (0, 1, 2, 3)),
                        _bhsd(ctx, k, op.layout, (0, 1, 3, 2))], [raw])
    ctx.emit("Mul", [raw, ctx.const(np.asarray(op.scale, dt), "scale")], [scores])
    if mask is not None:
        masked = ctx.fresh(like)
        if mask.dtype == np.bool_:
            ninf = ctx.const(np.asarray(-np.inf, dt), "neg_inf")
            ctx.emit("Where", [mask, scores, ninf], [masked])
        else:
            ctx.emit("Add", [scores, mask], [masked])
        scores = masked
    if op.causal:
        cut = ctx.fresh(like)
        ctx.emit("Add", [scores, _causal_bias(ctx, *_seqs(op, q, k), dt)], [cut])
        scores = cut
    return scores


def _logsumexp(ctx, scores, lse):
    """``lse`` (ONNX's Attention has no such output) from the masked scores."""
    if ctx.opset >= 18:
        ctx.emit("ReduceLogSumExp", [scores, ctx.const(np.array([-1], np.int64))], [lse],
                 keepdims=0)
    else:
        ctx.emit("ReduceLogSumExp", [scores], [lse], axes=[-1], keepdims=0)


def _composition(ctx, node):
    op = node.op
    out, lse = node.outputs
    scores = _scores(ctx, node)
    probs = ctx.fresh(out)
    ctx.emit("Softmax", [scores], [probs], axis=-1)
    vh = _bhsd(ctx, node.inputs[2], op.layout, (0, 1, 2, 3))
    if op.layout == "bhsd":
        ctx.emit("MatMul", [probs, vh], [out])
    else:
        o = ctx.fresh(out)
        ctx.emit("MatMul", [probs, vh], [o])
        ctx.emit("Transpose", [o], [out], perm=[0, 2, 1, 3])
    if ctx.is_read(lse):
        _logsumexp(ctx, scores, lse)


def _full_rows(ctx, mask, sq, sk):
    """``mask`` expanded to ``(.., sq, sk)`` trailing axes: ONNX broadcasts a mask of one
    row (a padding mask) but onnxruntime's Attention wants seq_q rows."""
    if mask.shape[-2:] == (sq, sk):
        return ctx.name(mask)
    full = ctx.fresh(mask)
    shape = (1,) * max(0, mask.ndim - 2) + (sq, sk)
    ctx.emit("Expand", [mask, ctx.const(np.array(shape, np.int64))], [full])
    return full


def _attention_op(ctx, node):
    """ONNX's Attention (opset 23): 3-d inputs for ``bshd``, 4-d ones for ``bhsd``."""
    op = node.op
    out, lse = node.outputs
    attrs = dict(scale=op.scale, is_causal=int(op.causal))
    ins = list(node.inputs[:3])
    if op.layout == "bshd":
        attrs.update(q_num_heads=ins[0].shape[2], kv_num_heads=ins[1].shape[2])
        ins = [_reshape(ctx, t, t, t.shape[:2] + (t.shape[2] * t.shape[3],)) for t in ins]
    if len(node.inputs) > 3:
        ins.append(_full_rows(ctx, node.inputs[3], *_seqs(op, *node.inputs[:2])))
    if op.layout == "bshd":
        flat = ctx.fresh(out)
        ctx.emit("Attention", ins, [flat], **attrs)
        ctx.emit("Reshape", [flat, shape_const(ctx, out, out.shape)], [out])
    else:
        ctx.emit("Attention", ins, [out], **attrs)
    if ctx.is_read(lse):
        _logsumexp(ctx, _scores(ctx, node), lse)


@exporter("ScaledDotProductAttention")
def attention(ctx, node):
    if ctx.opset >= 23:
        _attention_op(ctx, node)
    else:
        _composition(ctx, node)
