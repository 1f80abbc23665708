"""Export of LayerNorm, attention and the models built from them (the GPT example): the
graph passes onnx's full checker and onnxruntime (which runs opset 23's Attention too)
gives our outputs."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from singa_graph import cli, layer, model, ops, opt, random as sg_random
from singa_graph import onnx as sonnx_io
from singa_graph.ir import Graph, Placeholder
from singa_graph.ir.tensor import Tensor

RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _ort(proto, *xs):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})


def _check(proto, opset, *attention_types):
    onnx.checker.check_model(proto, full_check=True)
    assert proto.opset_import[0].version == opset
    types = {n.op_type for n in proto.graph.node}
    assert set(attention_types) <= types, types
    if opset < 23:
        assert "Attention" not in types
    return types


def _export_fn(fn, arrays, opset):
    phs = [Placeholder(a.shape, a.dtype, name=f"x{i}") for i, a in enumerate(arrays)]
    outs = fn(*phs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    proto = sonnx_io.export(Graph(outs, inputs=phs), opset=opset)
    want = fn(*[Tensor(data=a, requires_grad=False) for a in arrays])
    want = [w.to_numpy() for w in (want if isinstance(want, (list, tuple)) else [want])]
    return proto, want


def _matches(proto, want, *arrays, tol=1e-5):
    for w, got in zip(want, _ort(proto, *arrays)):
        assert got.shape == w.shape and got.dtype == w.dtype
        np.testing.assert_allclose(got, w, rtol=tol, atol=tol)


MASKS = {
    "none": None,
    "float": lambda b, h, s: (RNG.standard_normal((1, h, s, s)) * 2).astype(np.float32),
    "bool": lambda b, h, s: np.tril(np.ones((s, s), bool)) | (RNG.random((b, 1, s, s)) < .5),
}


@pytest.mark.parametrize("opset", [17, 23])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("causal", [False, True])
def test_attention_op_matches_onnxruntime(opset, layout, mask, causal):
    b, h, s, d = 2, 3, 5, 4
    shape = (b, h, s, d) if layout == "bhsd" else (b, s, h, d)
    arrays = [_f32(*shape) for _ in range(3)]
    if MASKS[mask] is not None:
        arrays.append(MASKS[mask](b, h, s))

    def fn(q, k, v, *m):
        return ops.scaled_dot_product_attention(q, k, v, m[0] if m else None, causal,
                                                layout=layout)
    proto, want = _export_fn(fn, arrays, opset)
    _check(proto, opset, "Attention" if opset >= 23 else "Softmax")
    _matches(proto, want, *arrays)


@pytest.mark.parametrize("opset", [17, 18, 23])
def test_saved_statistics_export_where_read(opset):
    """The logsumexp of attention and LayerNorm's mean and rstd, as graph outputs."""
    q, k, v = (_f32(2, 4, 2, 3) for _ in range(3))
    x, sc, bi = _f32(2, 3, 6), _f32(6), _f32(6)

    def fn(q, k, v, x, sc, bi):
        _, lse = ops.ScaledDotProductAttention(causal=True, scale=0.7, layout="bshd")(q, k, v)
        return [lse] + list(ops.LayerNorm(axis=2, eps=1e-3)(x, sc, bi))
    proto, want = _export_fn(fn, [q, k, v, x, sc, bi], opset)
    assert "ReduceLogSumExp" in _check(proto, opset, "LayerNormalization")
    _matches(proto, want, q, k, v, x, sc, bi)


def test_unread_statistics_are_left_out():
    x = _f32(2, 3, 6)
    proto, _ = _export_fn(lambda x: ops.layer_norm(x, Tensor(data=_f32(3, 6)),
                                                   Tensor(data=_f32(3, 6)), 2), [x], 17)
    (ln,) = [n for n in proto.graph.node if n.op_type == "LayerNormalization"]
    assert len(ln.output) == 1 and ln.attribute[0].i == 1  # axis 1: normalizes (3, 6)


class _Blocks(model.Model):
    """Two pre-norm blocks (one causal) and a boolean padding mask input."""

    def __init__(self):
        super().__init__()
        self.b1 = layer.TransformerBlock(16, 4, approximate="tanh")
        self.b2 = layer.TransformerBlock(16, 2, causal=True)
        self.ln = layer.LayerNorm(16)

    def forward(self, x, mask):
        return self.ln(self.b2(self.b1(x, mask)))


@pytest.mark.parametrize("opset", [17, 20, 23])
def test_transformer_blocks_with_a_mask_and_a_symbolic_batch(opset):
    sg_random.seed(0)
    m = _Blocks()
    x, mask = _f32(3, 7, 16), RNG.random((3, 1, 1, 7)) < 0.8
    mask[:, ..., 0] = True
    m.compile([x, mask], is_train=False)
    proto = sonnx_io.export(m, opset=opset, dynamic_batch=True)
    _check(proto, opset, "LayerNormalization", "Attention" if opset >= 23 else "Softmax")
    for n in (3, 5):
        xs, ms = _f32(n, 7, 16), np.concatenate([mask, mask])[:n]
        (got,) = _ort(proto, xs, ms)
        np.testing.assert_allclose(got, m(xs, ms).to_numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", [17, 23])
@pytest.mark.parametrize("tied", [False, True])
def test_gpt_example_exports_after_training(opset, tied):
    gpt = cli.load_example("gpt")
    sg_random.seed(3)
    m = gpt.GPT(len(gpt.VOCAB), 12, d_model=32, num_heads=4, blocks=2, tied=tied)
    ids = RNG.integers(0, len(gpt.VOCAB), (4, 12)).astype(np.int32)
    m.set_optimizer(opt.Adam(lr=1e-2))
    m.compile([ids], is_train=True, use_graph=True)
    for _ in range(2):  # LayerNorm scales and biases move away from ones and zeros
        m(ids, np.roll(ids, -1, 1).reshape(-1))
    m.eval()
    ours = m(ids).to_numpy()
    proto = sonnx_io.export(m, opset=opset, dynamic_batch=True)
    types = _check(proto, opset, "LayerNormalization", "Gather")
    assert ("Attention" in types) == (opset >= 23)
    (theirs,) = _ort(proto, ids)
    np.testing.assert_allclose(theirs, ours, rtol=1e-4, atol=1e-4)
    # onnx's own reference evaluator agrees too (an implementation independent of ORT's)
    (ref,) = ReferenceEvaluator(proto).run(None, {proto.graph.input[0].name: ids})
    np.testing.assert_allclose(ref, ours, rtol=1e-4, atol=1e-4)
    more = np.concatenate([ids, ids[:2]])  # the symbolic batch: 6 sequences
    (t6,) = _ort(proto, more)
    np.testing.assert_allclose(t6, m(more).to_numpy(), rtol=1e-4, atol=1e-4)
