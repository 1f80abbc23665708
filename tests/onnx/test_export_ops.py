"""Export of the op library's ops: each graph passes the full checker (inside ``export``) and
runs in onnxruntime with our eager results (max abs error < 1e-4)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from singa_graph import cli, layer, model, ops, random as sg_random
from singa_graph import onnx as sonnx_io
from singa_graph.ir import Graph, Placeholder
from singa_graph.ir.tensor import Tensor

RNG = np.random.default_rng(0)


def _ort(proto, *xs):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})


def _matches_eager(fn, *arrays, opset=17, tol=1e-4):
    """Export ``fn`` traced on Placeholders; onnxruntime's outputs equal ``fn``'s eager ones."""
    phs = [Placeholder(a.shape, a.dtype, name=f"x{i}") for i, a in enumerate(arrays)]
    outs = fn(*phs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    proto = sonnx_io.export(Graph(outs, inputs=phs), opset=opset)
    want = fn(*[Tensor(data=a, requires_grad=False) for a in arrays])
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    for w, got in zip(want, _ort(proto, *arrays)):
        w = w.to_numpy()
        assert got.shape == w.shape and got.dtype == w.dtype, (got.shape, w.shape, got.dtype)
        np.testing.assert_allclose(got, w, rtol=tol, atol=tol)
    return proto


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_math_ops():
    x = _f32(3, 5) * 2
    x[0, :4] = [0.5, -0.5, 1.5, -2.5]  # halves: to even (Round) and away from zero (round)
    unit = np.tanh(x)
    big = np.abs(x) + 1.0
    math = [ops.sin, ops.cos, ops.atan, ops.sinh, ops.cosh, ops.asinh, ops.erf, ops.ceil,
            ops.floor, ops.rounde, ops.round, ops.reciprocal, ops.tan]
    _matches_eager(lambda a, u, b: [f(a) for f in math] + [ops.asin(u), ops.acos(u),
                                                           ops.atanh(u), ops.acosh(b)],
                   x, unit, big)


@pytest.mark.parametrize("opset", [17, 20])
def test_activations(opset):
    x, slope = _f32(2, 3, 4), np.abs(_f32(3, 1)) * 0.1
    acts = [lambda a: ops.selu(a), lambda a: ops.elu(a, 0.7),
            lambda a: ops.hardsigmoid(a, 0.3, 0.4), ops.softplus, ops.softsign,
            lambda a: ops.gelu(a), lambda a: ops.gelu(a, "tanh")]
    _matches_eager(lambda a, s: [f(a) for f in acts] + [ops.prelu(a, s)], x, slope,
                   opset=opset)


def test_comparisons_logic_where_max_min():
    a, b = np.round(_f32(3, 4)), np.round(_f32(4))
    i, j = RNG.integers(-3, 3, (3, 4)).astype(np.int64), RNG.integers(-3, 3, 4)

    def fn(a, b, i, j):
        return [ops.greater(a, b), ops.less(a, b), ops.equal(a, b),
                ops.logical_and(a, b), ops.logical_or(a, b), ops.logical_xor(i, j),
                ops.logical_not(a), ops.where(ops.greater(a, b), a, b), ops.where(i, a, b),
                ops.maximum(a, b, a), ops.minimum(i, j)]
    _matches_eager(fn, a, b, i, j.astype(np.int64))


def test_shape_ops():
    x = _f32(2, 1, 4, 6)

    def fn(x):
        return [ops.shape_of(x), ops.squeeze(x), ops.unsqueeze(x, [0, -1]),
                ops.slice(x, [-1, 5], [-(2 ** 62), 0], [2, 3], [-2, -2]),
                ops.tile(x, [2, 1, 1, 2, 1]), ops.pad(x, "reflect", [0, 0, 2, 3, 0, 0, 1, 2]),
                ops.pad(x, "edge", [1, 0, 0, 1, 0, 0, 2, 0]),
                ops.pad(x, "constant", [0, 1, 1, 0, 0, 0, 0, 2], 0.5),
                ops.upsample(x, "nearest", [1, 2, 2, 3])]
    _matches_eager(fn, x)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_and_space_blocks(mode):
    x = _f32(2, 8, 2, 3)
    _matches_eager(lambda x: [ops.depth_to_space(x, 2, mode),
                              ops.space_to_depth(ops.depth_to_space(x, 2, mode), 2, mode)], x)


def test_indexing_ops():
    x = _f32(4, 5)
    ids = np.array([[3, 0], [-1, 2]], np.int64)
    along = RNG.integers(0, 5, (4, 2)).astype(np.int64)
    hot = np.array([[0, 3, -2], [5, -7, 1]], np.int64)  # 5 and -7 wrap modulo the depth 4

    def fn(x, ids, along, hot):
        return [ops.gather(x, 1, [[0, -1], [2, 2]]), ops.take(x, ids, 0),
                ops.gather_elements(x, along, 1),
                ops.scatter_elements(x, along, ops.gather_elements(x, along, 1), 1),
                ops.onehot(1, hot, 4, (-1.0, 2.0))]
    _matches_eager(fn, x, ids, along, hot)


def test_lstm_cell_and_transposed_convolution():
    pre, c = _f32(3, 20), _f32(3, 5)
    dy, w = _f32(2, 4, 3, 4), _f32(4, 3, 3, 2)
    conv_t = ops.Conv2dGradInput((2, 3), (1, 0, 0, 1), (1, 2), 1, x_shape=(2, 3, 6, 11))
    _matches_eager(lambda p, c, d, w: list(ops.lstm_cell(p, c)) + [conv_t(d, w)],
                   pre, c, dy, w)


class _NewOps(model.Model):
    """A small image model made of ops that export since the op library landed."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(8, 3, padding=0)
        self.head = layer.Linear(5)

    def forward(self, x):
        y = ops.pad(x, "reflect", [0, 0, 1, 1, 0, 0, 1, 1])
        y = ops.gelu(self.conv(y))
        y = ops.depth_to_space(y, 2)
        y = ops.maximum(ops.selu(y), ops.upsample(ops.erf(x), "nearest", [1, 1, 2, 2]))
        y = ops.where(ops.greater(y, 0.0), y, ops.mul(ops.sin(y), 0.1))
        y = ops.slice(y, [-1], [-(2 ** 62)], [3], [-1])  # mirror the columns
        return self.head(ops.flatten(y))


def test_model_with_new_ops_exports_with_a_symbolic_batch():
    sg_random.seed(0)
    m = _NewOps()
    x = _f32(3, 2, 6, 6)
    m.compile([x], is_train=False)
    proto = sonnx_io.export(m, dynamic_batch=True)
    types = {n.op_type for n in proto.graph.node}
    assert {"Pad", "DepthToSpace", "Max", "Selu", "Erf", "Resize", "Where", "Slice"} <= types
    for batch in (x, _f32(5, 2, 6, 6)):
        (theirs,) = _ort(proto, batch)
        assert np.abs(theirs - m(batch).to_numpy()).max() < 1e-4


def test_sequence_example_model_exports():
    """The char-RNN example (Embedding -> LSTM -> Linear) runs in onnxruntime."""
    ex = cli.load_example("char_rnn")
    sg_random.seed(0)
    m = ex.CharRNN(vocab_size=11, hidden_size=8, embed_size=6)
    ids = np.random.default_rng(0).integers(0, 11, (4, 5)).astype(np.int32)
    m.compile([ids], is_train=False)
    ours = m(ids).to_numpy()
    proto = sonnx_io.export(m)
    (theirs,) = _ort(proto, ids)
    assert np.abs(theirs - ours).max() < 1e-4
    again = sonnx_io.load(proto)(ids).to_numpy()  # and it imports back
    assert np.abs(again - ours).max() < 1e-5
