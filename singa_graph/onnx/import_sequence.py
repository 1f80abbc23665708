"""ONNX -> singa_graph: Sequence* and Optional* with a static meaning.

A sequence is a Python list of values (Tensors, or numpy arrays known while building) while
the graph is traced, and an optional is its value or None (empty). Their lengths and
positions are known when the graph is built, so every op here is resolved while tracing and
no kernel ever sees a sequence: SequenceAt is an element, ConcatFromSequence a Concat,
SplitToSequence a Split, SequenceMap its body traced once per element. A position or split
computed at run time would make the sequence's length or its elements' shapes a run-time
quantity, which the static planner cannot plan: those raise UnsupportedOpError.
"""
from __future__ import annotations

import numpy as np

from .. import ops
from ..errors import UnsupportedOpError
from ..ir.tensor import Tensor
from .import_control import inline
from .program import NeedsValue, constant
from . import import_math  # noqa: F401  (Identity's tensor form, wrapped below)
from .registry import IMPORTERS, importer


def _seq(n, i) -> list:
    v = n._raw(i)
    if not isinstance(v, list):
        n.fail(f"input {i} ({n.proto.input[i]!r}) is not a sequence")
    return v


def _index(n, i, length, default):
    """The position input ``i`` as a Python int in ``[0, length]`` (negative counts from the
    end); a position computed at run time is refused."""
    if not n.has(i):
        return default
    pos = int(np.asarray(_known(n, i, "a position")).reshape(-1)[0])
    if pos < 0:
        pos += length
    return pos


def _known(n, i, what):
    """Input ``i``'s value while building. A graph input raises NeedsValue (a caller that
    can, the ONNX backend, then builds with its value); a value computed by the graph
    makes the sequence's layout a run-time quantity: refused."""
    try:
        return n.const(i)
    except NeedsValue:
        if n.proto.input[i] in n._program.inputs:
            raise
        raise UnsupportedOpError(f"{n.op_type} node {n.name!r}: {what} computed at run time "
                                 "make the sequence's layout a run-time quantity, which the "
                                 "static planner cannot plan") from None


def _value(n, i):
    v = n._raw(i)
    return v if isinstance(v, (Tensor, np.ndarray, list)) or v is None else np.asarray(v)


def _tensor(v):
    return v if isinstance(v, Tensor) else constant(v)


@importer("SequenceEmpty")
def sequence_empty(n):
    return [[]]


@importer("SequenceConstruct")
def sequence_construct(n):
    return [[_value(n, i) for i in range(n.n_inputs) if n.has(i)]]


@importer("SequenceLength")
def sequence_length(n):
    return np.array(len(_seq(n, 0)), np.int64)


@importer("SequenceAt")
def sequence_at(n):
    seq = _seq(n, 0)
    pos = _index(n, 1, len(seq), None)
    if not 0 <= pos < len(seq):
        raise UnsupportedOpError(f"SequenceAt node {n.name!r}: position {pos} is outside a "
                                 f"sequence of {len(seq)}")
    return seq[pos]


@importer("SequenceInsert")
def sequence_insert(n):
    seq = _seq(n, 0)
    pos = _index(n, 2, len(seq), len(seq))
    return [seq[:pos] + [_value(n, 1)] + seq[pos:]]


@importer("SequenceErase")
def sequence_erase(n):
    seq = _seq(n, 0)
    pos = _index(n, 1, len(seq), len(seq) - 1)
    if not 0 <= pos < len(seq):
        raise UnsupportedOpError(f"SequenceErase node {n.name!r}: position {pos} is outside "
                                 f"a sequence of {len(seq)}")
    return [seq[:pos] + seq[pos + 1:]]


@importer("ConcatFromSequence")
def concat_from_sequence(n):
    seq = _seq(n, 0)
    if not seq:
        n.fail("an empty sequence")
    axis, new = int(n.attr("axis")), int(n.attr("new_axis", 0))
    if all(isinstance(v, np.ndarray) for v in seq):
        return (np.stack if new else np.concatenate)(seq, axis=axis)
    xs = [_tensor(v) for v in seq]
    if new:
        rank = len(xs[0].shape) + 1
        xs = [ops.unsqueeze(x, [axis % rank]) for x in xs]
        axis %= rank
    else:
        axis %= len(xs[0].shape)
    return ops.cat(xs, axis) if len(xs) > 1 else ops.identity(xs[0])


@importer("SplitToSequence")
def split_to_sequence(n):
    x = _tensor(n._raw(0))
    axis = int(n.attr("axis", 0)) % len(x.shape)
    dim = x.shape[axis]
    if n.has(1):
        split = np.asarray(_known(n, 1, "split sizes"))
        if split.ndim == 0:
            k = int(split)
            parts = [k] * (dim // k) + ([dim % k] if dim % k else [])
        else:
            parts = [int(s) for s in split]
        squeeze = False
    else:
        parts = [1] * dim
        squeeze = not int(n.attr("keepdims", 1))
    pieces = list(ops.split(x, axis, parts)) if len(parts) > 1 else [ops.identity(x)]
    if squeeze:
        pieces = [ops.squeeze(p, [axis]) for p in pieces]
    return [pieces]


@importer("SequenceMap")
def sequence_map(n):
    body = n.attr("body")
    seqs = {i: _seq(n, i) for i in range(n.n_inputs) if isinstance(n._raw(i), list)}
    lengths = {len(s) for s in seqs.values()}
    if len(lengths) != 1:
        n.fail(f"sequences of different lengths {sorted(lengths)}")
    outs: list[list] = [[] for _ in body.output]
    for j in range(lengths.pop()):
        vals = [seqs[i][j] if i in seqs else _value(n, i) for i in range(n.n_inputs)]
        for lst, v in zip(outs, inline(n, body, vals)):
            lst.append(v)
    return outs


# ---------------------------------------------------------------------- optionals
@importer("Optional")
def optional(n):
    if not n.has(0):
        return [None]  # an empty optional of the type the attribute names
    return [_value(n, 0)]


@importer("OptionalHasElement")
def optional_has_element(n):
    return np.array(n.has(0) and n._raw(0) is not None)


@importer("OptionalGetElement")
def optional_get_element(n):
    v = n._raw(0)
    if v is None:
        raise UnsupportedOpError(f"OptionalGetElement node {n.name!r}: the optional "
                                 f"{n.proto.input[0]!r} is empty")
    return [v]


def _structures_pass(fn):
    """Identity of a sequence or an optional is that value (the tensor form copies)."""

    def imp(n):
        v = n._raw(0)
        return [v] if v is None or isinstance(v, list) else fn(n)

    imp.__name__ = fn.__name__
    return imp


for _since, _fn in list(IMPORTERS.get("Identity", {}).items()):
    IMPORTERS["Identity"][_since] = _structures_pass(_fn)
