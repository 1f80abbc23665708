"""ONNX -> singa_graph: the Attention op (opsets 23 to 25).

Attention maps onto the library's fused :class:`~singa_graph.ops.ScaledDotProductAttention`
whenever its result is all that is asked for: 3-D inputs ``(batch, seq, heads * dim)`` are
reshaped for free into the op's ``bshd`` layout, grouped-query heads (``kv_num_heads <
q_num_heads``) are repeated, ``past_key``/``past_value`` are concatenated in front of the
new keys and values (giving ``present_key``/``present_value``), and every constraint on
which keys a query sees (``attn_mask``, boolean or additive, padded to the key length;
``is_causal``; the sliding window; ``nonpad_kv_seqlen``) becomes one mask. Causal masking
is aligned to the bottom right as ONNX specifies: with a cache of ``P`` keys, query ``i``
sees keys ``j <= i + P``.

A query row that no key may attend answers 0 (ONNX's rule; a softmax over nothing is NaN):
where a mask may hide a whole row, that row is let see every key and its output is zeroed
by a Where afterwards, so neither the forward nor the gradients meet a NaN.

``softcap`` and the ``qk_matmul_output`` output need the scores themselves, so those
nodes are composed from MatMul, Tanh, Softmax and Where instead. float16 inputs are
computed in float32 (the attention and softmax kernels have no float16 form) and the
result rounded once.
"""
from __future__ import annotations

import numpy as np

from .. import ops
from ..ir.dtypes import NARROW_FLOATS
from ..ir.tensor import Tensor
from .import_logic import _bool
from .program import constant, scalar_like
from .registry import importer


def _heads(x, heads, n, what):
    """A 3-D ``(batch, seq, heads * dim)`` input as ``(batch, seq, heads, dim)``."""
    if heads is None:
        n.fail(f"3-D {what} without q_num_heads and kv_num_heads")
    if x.shape[2] % heads:
        n.fail(f"{what} of width {x.shape[2]} in {heads} heads")
    return ops.reshape(x, (x.shape[0], x.shape[1], heads, x.shape[2] // heads))


def _repeat_heads(x, reps, axis):
    """Each head of ``x`` repeated ``reps`` times in place: h0, h0, h1, h1 ..."""
    if reps == 1:
        return x
    shape = list(x.shape)
    wide = ops.broadcast_to(ops.unsqueeze(x, [axis + 1]),
                            tuple(shape[:axis + 1] + [reps] + shape[axis + 1:]))
    shape[axis] *= reps
    return ops.reshape(wide, tuple(shape))


def _allowed(sq, skv, offset, causal, left, right):
    """The (sq, skv) boolean matrix of the keys each query may see under the causal and
    sliding-window rules, query ``i`` sitting at position ``i + offset``; None if all."""
    if not causal and left < 0 and right < 0:
        return None
    diff = (np.arange(sq)[:, None] + offset) - np.arange(skv)[None, :]
    keep = np.ones((sq, skv), np.bool_)
    if causal:
        keep &= diff >= 0
    if left >= 0:
        keep &= diff <= left
    if right >= 0:
        keep &= -diff <= right
    return keep


def _allowed_per_batch(nonpad, sq, skv, causal, left, right):
    """``(batch, 1, sq, skv)`` booleans for ``nonpad_kv_seqlen`` (the valid keys of each
    batch entry; causal and window rules offset by ``nonpad - sq``)."""
    valid = ops.reshape(nonpad, (nonpad.shape[0], 1, 1, 1))
    j = np.arange(skv)[None, :]
    keep = _less(constant(np.broadcast_to(j, (sq, skv)).astype(nonpad.dtype)), valid)
    # query i sees key j when  j <= i + nonpad - sq  (causal), i.e.  j - i + sq - 1 < nonpad
    rel = (j - np.arange(sq)[:, None] + sq).astype(nonpad.dtype)  # j - i + sq
    if causal:
        keep = _and(keep, _less(constant(rel - 1), valid))
    if left >= 0:  # i + nonpad - sq - j <= left  <=>  nonpad < j - i + sq + left + 1
        keep = _and(keep, _less(valid, constant(rel + left + 1)))
    if right >= 0:  # j - (i + nonpad - sq) <= right  <=>  j - i + sq - right - 1 < nonpad
        keep = _and(keep, _less(constant(rel - right - 1), valid))
    return keep


def _less(a, b):
    return _bool(ops.less(a, b))


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return _bool(ops.logical_and(a, b))


def _padded_mask(mask, skv):
    """``attn_mask`` widened to ``skv`` keys: the missing ones masked (False / -inf)."""
    short = skv - mask.shape[-1]
    if short <= 0:
        return mask
    fill = False if mask.dtype == np.bool_ else -np.inf
    tail = constant(np.full(mask.shape[:-1] + (short,), fill, mask.dtype))
    return ops.cat([mask, tail], mask.ndim - 1)


def _as_tensor(v):
    return v if isinstance(v, Tensor) else constant(np.asarray(v))


def _row_seen(allowed, mask):
    """Booleans, ``(..., sq, 1)``: does query row see any key? None when every row does for
    sure (no run-time mask, and a constant rule that leaves each row a key)."""
    if mask is None and (allowed is None or (not isinstance(allowed, Tensor)
                                             and allowed.any(-1).all())):
        return None
    seen = None
    if mask is not None:
        seen = mask if mask.dtype == np.bool_ else \
            _bool(ops.logical_not(ops.equal(mask, scalar_like(-np.inf, mask))))
    if allowed is not None:
        seen = _and(seen, _as_tensor(allowed))
    count = ops.sum(ops.cast(seen, np.float32), -1, True)
    return _bool(ops.greater(count, constant(np.zeros((), np.float32))))


def _keys_seen(mask, sq, skv, offset, nonpad, causal, left, right, kernel_causal):
    """``(mask, guard)``: one mask for the attention op holding every rule on which keys a
    query sees (``attn_mask`` padded to ``skv`` keys; the causal and window rules with
    queries at ``offset`` or, with ``nonpad_kv_seqlen``, per batch at run time), and the
    booleans of :func:`_row_seen` (None when no row can be hidden). ``kernel_causal``: the
    attention op applies its own top-left causal rule, which the guard must know."""
    if nonpad is not None:
        allowed = _allowed_per_batch(nonpad, sq, skv, causal, left, right)
    else:
        allowed = _allowed(sq, skv, offset, causal, left, right)
    if mask is not None:
        mask = _padded_mask(mask, skv)
    guard = _row_seen(_allowed(sq, skv, 0, True, -1, -1) if kernel_causal else allowed, mask)
    if mask is None:
        full = None if allowed is None else _as_tensor(allowed)
    elif allowed is None:
        full = mask
    elif mask.dtype == np.bool_:
        full = _and(mask, _as_tensor(allowed))
    else:
        full = ops.where(_as_tensor(allowed), mask, scalar_like(-np.inf, mask))
    return full, guard


@importer("Attention", since=23)
def attention(n):
    q, k, v = n.t(0), n.t(1), n.t(2)
    out_dtype = q.dtype
    if q.dtype == np.float16 or q.dtype in NARROW_FLOATS:
        # no float16 or bfloat16 kernels: compute in float32, round once
        q, k, v = (ops.cast(t, np.float32) for t in (q, k, v))
    dt = q.dtype
    mask = n.t(3) if n.has(3) else None
    if mask is not None and mask.dtype != np.bool_ and mask.dtype != dt:
        mask = ops.cast(mask, dt)
    past_k = n.t(4) if n.has(4) else None
    past_v = n.t(5) if n.has(5) else None
    nonpad = n.t(6) if n.has(6) else None
    if (past_k is None) != (past_v is None):
        n.fail("past_key without past_value (or the reverse)")
    if nonpad is not None and past_k is not None:
        n.fail("nonpad_kv_seqlen together with past_key/past_value")
    causal = bool(n.attr("is_causal", 0))
    scale = n.attr("scale")
    softcap = float(n.attr("softcap", 0.0) or 0.0)
    left, right = int(n.attr("left_window_size", -1)), int(n.attr("right_window_size", -1))
    want_qk = len(n.proto.output) > 3 and bool(n.proto.output[3])
    want_present = any(len(n.proto.output) > i and n.proto.output[i] for i in (1, 2))

    three_d = q.ndim == 3
    if three_d:
        q = _heads(q, n.attr("q_num_heads"), n, "Q")
        k = _heads(k, n.attr("kv_num_heads"), n, "K")
        v = _heads(v, n.attr("kv_num_heads"), n, "V")
    elif q.ndim != 4:
        n.fail(f"Q of rank {q.ndim} (3 or 4 is required)")
    # bshd (3-D inputs, free) unless a cache or the composed form wants bhsd
    composed = softcap > 0 or want_qk
    layout = "bshd" if three_d and past_k is None and not want_present and not composed \
        else "bhsd"
    if three_d and layout == "bhsd":
        q, k, v = (ops.transpose(t, (0, 2, 1, 3)) for t in (q, k, v))
    if past_k is not None:
        past_k, past_v = (t if t.dtype == dt else ops.cast(t, dt) for t in (past_k, past_v))
        k = ops.cat([past_k, k], 2)
        v = ops.cat([past_v, v], 2)
    present_k, present_v = k, v
    head_axis = 2 if layout == "bshd" else 1
    seq_axis = 1 if layout == "bshd" else 2
    hq, hkv = q.shape[head_axis], k.shape[head_axis]
    if hq != hkv:
        if hq % hkv or v.shape[head_axis] != hkv:
            n.fail(f"{hq} query heads over {hkv} key/value heads")
        k, v = (_repeat_heads(t, hq // hkv, head_axis) for t in (k, v))
    sq, skv = q.shape[seq_axis], k.shape[seq_axis]

    kernel_causal = (causal and past_k is None and nonpad is None and left < 0
                     and right < 0 and not composed)
    full, guard = _keys_seen(mask, sq, skv, past_k.shape[2] if past_k is not None else 0,
                             nonpad, causal and not kernel_causal, left, right, kernel_causal)
    if composed:
        y, qk = _composed(n, q, k, v, full, guard, scale, softcap)
    else:
        if guard is not None:  # a hidden row sees every key instead: no NaN to zero later
            full = _bool(ops.logical_or(full, _bool(ops.logical_not(guard)))) \
                if full.dtype == np.bool_ else ops.where(guard, full, scalar_like(0, full))
        y = ops.scaled_dot_product_attention(q, k, v, full, kernel_causal, scale, layout)
        qk = None
        if guard is not None:
            if layout == "bshd":  # the guard is (..., sq, 1) over (batch, heads, sq, 1)
                b, s_, h, _ = y.shape
                guard = ops.transpose(ops.broadcast_to(guard, (b, h, s_, 1)), (0, 2, 1, 3))
            y = ops.where(guard, y, scalar_like(0, y))
    if three_d:
        if layout == "bhsd":
            y = ops.transpose(y, (0, 2, 1, 3))
        y = ops.reshape(y, (y.shape[0], y.shape[1], y.shape[2] * y.shape[3]))
    outs = [y, present_k, present_v] + ([qk] if qk is not None else [])
    if out_dtype != dt:
        outs = [ops.cast(t, out_dtype) for t in outs]
    return outs


def _composed(n, q, k, v, mask, guard, scale, softcap):
    """Attention as MatMul, (Tanh softcap), mask Add, Softmax, Where, MatMul on ``bhsd``
    tensors, as ONNX's function body; returns (output, the qk_matmul_output asked for)."""
    mode = int(n.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        n.fail(f"qk_matmul_output_mode={mode}")
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    root = scalar_like(np.sqrt(scale), q)
    scores = ops.matmul(ops.mul(q, root), ops.mul(k, root), trans_b=True)
    if softcap > 0:
        cap = scalar_like(softcap, scores)
        scores = ops.mul(ops.tanh(ops.div(scores, cap)), cap)
    qk = scores
    if mask is not None:
        bias = mask if mask.dtype != np.bool_ else ops.where(
            mask, scalar_like(0, scores), scalar_like(-np.inf, scores))
        biased = ops.add(scores, bias)
        if mode == 2:
            qk = biased
        # a hidden row takes the unmasked scores (its softmax stays finite; zeroed below)
        scores = biased if guard is None else ops.where(guard, biased, scores)
    p = ops.softmax(scores, scores.ndim - 1)
    if guard is not None:
        p = ops.where(guard, p, scalar_like(0, p))
    if mode == 3:
        qk = p
    if mode == 2 and mask is None:
        qk = ops.identity(scores)
    return ops.matmul(p, v), qk
