"""ONNX Attention (opset 23), Einsum and CumSum imports, and constant folding that leaves what
it cannot evaluate to run time.

torch 2.13's TorchScript exporter stops at opset 20 and its dynamo exporter needs
onnxscript, so the opset-23 models are written with onnx.helper; onnxruntime runs them.
ONNX's own node tests (tests/onnx/test_backend.py) cover every attribute of Attention.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa_graph import onnx as sonnx_io
from singa_graph import opt
from singa_graph.errors import UnsupportedOpError

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
vi = helper.make_tensor_value_info
rng = np.random.default_rng(0)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _model(nodes, inputs, outputs, inits=None, opset=23):
    g = helper.make_graph(nodes, "g", inputs, outputs,
                          [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _ort(m, feeds):
    import onnxruntime as ort

    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _self_attention(mask=None, causal=0, heads=4, kv_heads=2, d=32):
    """x (batch, 6, d) -> Q/K/V projections (grouped-query: fewer K/V heads) -> 3-D
    Attention -> output projection -> (batch, 6, d)."""
    dk = d // heads * kv_heads
    inits = {"wq": _f32(d, d) / 6, "wk": _f32(d, dk) / 6, "wv": _f32(d, dk) / 6,
             "wo": _f32(d, d) / 6}
    nodes = [helper.make_node("MatMul", ["x", w], [w + "x"]) for w in ("wq", "wk", "wv")]
    ins = ["wqx", "wkx", "wvx"] + ([] if mask is None else ["mask"])
    nodes += [helper.make_node("Attention", ins, ["a"], is_causal=causal, q_num_heads=heads,
                               kv_num_heads=kv_heads),
              helper.make_node("MatMul", ["a", "wo"], ["y"])]
    inputs = [vi("x", F, ["batch", 6, d])]
    if mask is not None:
        inputs.append(vi("mask", mask, ["batch", 1, 6, 6]))
    return _model(nodes, inputs, [vi("y", F, ["batch", 6, d])], inits)


def _key_padding(batch, dtype):
    keep = np.ones((batch, 1, 6, 6), np.bool_)  # onnxruntime wants the query axis full
    keep[0, ..., 4:] = False
    return keep if dtype == B else np.where(keep, 0, -np.inf).astype(np.float32)


@pytest.mark.parametrize("mask,causal", [(None, 1), (B, 0), (F, 1)])
def test_opset23_attention_model_matches_onnxruntime(mask, causal):
    m = _self_attention(mask, causal)
    im = sonnx_io.load(m)
    for batch in (2, 3):
        feeds = {"x": _f32(batch, 6, 32)}
        if mask is not None:
            feeds["mask"] = _key_padding(batch, mask)
        want = _ort(m, feeds)[0]
        got = im(*feeds.values()).to_numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_opset23_attention_with_a_cache_matches_onnxruntime():
    """4-D inputs with past_key/past_value: present_* are the caches with the new keys
    appended, and causal masking is aligned to the bottom right (the new queries follow the
    cached keys)."""
    node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"],
                            ["y", "present_k", "present_v"], is_causal=1)
    m = _model([node], [vi("q", F, [2, 4, 3, 8]), vi("k", F, [2, 4, 3, 8]),
                        vi("v", F, [2, 4, 3, 8]), vi("pk", F, [2, 4, 5, 8]),
                        vi("pv", F, [2, 4, 5, 8])],
               [vi("y", F, [2, 4, 3, 8]), vi("present_k", F, [2, 4, 8, 8]),
                vi("present_v", F, [2, 4, 8, 8])])
    feeds = {k: _f32(2, 4, 3 if k in "qkv" else 5, 8) for k in ("q", "k", "v", "pk", "pv")}
    want = _ort(m, feeds)
    got = [t.to_numpy() for t in sonnx_io.load(m)(*feeds.values())]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("hidden_row", [False, True])
def test_imported_attention_trains(hidden_row):
    """The imported Attention runs the fused attention op forward and backward: five SGD
    steps on a classification of the mean token lower the loss. A query row that its mask
    hides completely answers 0 and leaves every gradient finite."""
    m = _self_attention(B if hidden_row else None, 1)
    x = _f32(4, 6, 32)
    y = np.array([0, 5, 9, 31], np.int32)
    feeds = [x]
    if hidden_row:
        mask = _key_padding(4, B)
        mask[1, :, 2, :] = False
        feeds.append(mask)
    im = sonnx_io.load(_model(
        list(m.graph.node) + [helper.make_node("ReduceMean", ["y", "axes"], ["logits"],
                                               keepdims=0)],
        list(m.graph.input), [vi("logits", F, ["batch", 32])],
        {**{t.name: numpy_helper.to_array(t) for t in m.graph.initializer},
         "axes": np.array([1], np.int64)}))
    im.set_optimizer(opt.SGD(lr=0.5))
    im.compile(feeds, is_train=True, use_graph=True)
    losses = [float(im(*feeds, y)[1].to_numpy().ravel()[0]) for _ in range(5)]
    assert losses[-1] < losses[0] and np.all(np.isfinite(losses))
    assert all(np.isfinite(p.to_numpy()).all() for p in im.get_params().values())


# ---------------------------------------------------------------------- Einsum, CumSum
@pytest.mark.parametrize("equation,shapes", [
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("bsd,dk->bsk", [(2, 4, 5), (5, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),
    ("ij->ji", [(3, 4)]),
    ("bij->b", [(2, 3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ii->i", [(4, 4)]),
])
def test_einsum_matches_numpy(equation, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    xs = [_f32(*s) for s in shapes]
    want = np.einsum(equation, *xs)
    m = _model([helper.make_node("Einsum", names, ["y"], equation=equation)],
               [vi(n, F, s) for n, s in zip(names, shapes)], [vi("y", F, want.shape)],
               opset=17)
    got = sonnx_io.load(m)(*xs).to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_of_int64_run_time_data(exclusive, reverse):
    """RoBERTa's position ids: CumSum of an int64 mask computed from the input."""
    x = rng.integers(-5, 5, (3, 11)).astype(np.int64)
    m = _model([helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive,
                                 reverse=reverse)],
               [vi("x", I64, [3, 11])], [vi("y", I64, [3, 11])],
               {"axis": np.array(-1, np.int64)}, opset=17)
    want = _ort(m, {"x": x})[0]
    got = sonnx_io.load(m)(x).to_numpy()
    assert got.dtype == np.int64 and np.array_equal(got, want)


# ---------------------------------------------------------------------- constant folding
def _gather_elements_model():
    """``x + GatherElements(table, idx)`` where both are constants, as BERT's token-type
    buffer (a 64-long table: onnx.reference's GatherElements fails past 32)."""
    nodes = [helper.make_node("GatherElements", ["table", "idx"], ["g"], axis=1),
             helper.make_node("Cast", ["g"], ["gf"], to=F),
             helper.make_node("Add", ["x", "gf"], ["y"])]
    table = np.arange(64, dtype=np.int64).reshape(1, 64) * 3
    idx = np.array([[5, 0, 63, 40]], np.int64)
    return _model(nodes, [vi("x", F, [2, 4])], [vi("y", F, [2, 4])],
                  {"table": table, "idx": idx}, opset=17), table[0, idx[0]]


def test_constant_gather_elements_folds():
    m, picked = _gather_elements_model()
    x = _f32(2, 4)
    np.testing.assert_array_equal(sonnx_io.load(m)(x).to_numpy(), x + picked.astype(np.float32))


def test_a_constant_node_that_cannot_be_folded_runs_at_run_time(monkeypatch):
    from singa_graph.onnx import folding

    def broken(inputs, attrs):
        raise ValueError("no fold today")

    monkeypatch.setitem(folding.FOLDERS, "GatherElements", broken)
    m, picked = _gather_elements_model()
    x = _f32(2, 4)
    np.testing.assert_array_equal(sonnx_io.load(m)(x).to_numpy(), x + picked.astype(np.float32))


def test_attention_forms_it_cannot_import_name_the_reason():
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=3,
                            kv_num_heads=2)
    m = _model([node], [vi("q", F, [1, 2, 6]), vi("k", F, [1, 2, 4]), vi("v", F, [1, 2, 4])],
               [vi("y", F, [1, 2, 6])])
    with pytest.raises(UnsupportedOpError, match="3 query heads over 2 key/value heads"):
        sonnx_io.load(m)(_f32(1, 2, 6), _f32(1, 2, 4), _f32(1, 2, 4))


def test_hugging_face_mask_plumbing_on_run_time_int64_inputs():
    """An int64 attention mask and input ids turned into an additive bias as transformers
    exports it: Cast to bool, Not, Equal on int64, Or, And, Unsqueeze, Expand, Where with
    three-way broadcasting, and a Gather from an embedding table by int64 ids."""
    nodes = [
        helper.make_node("Cast", ["mask"], ["mb"], to=B),
        helper.make_node("Not", ["mb"], ["pad"]),
        helper.make_node("Equal", ["ids", "pad_id"], ["is_pad"]),
        helper.make_node("Or", ["pad", "is_pad"], ["hide"]),
        helper.make_node("And", ["hide", "hide"], ["hide2"]),
        helper.make_node("Unsqueeze", ["hide2", "axes"], ["h4"]),
        helper.make_node("Expand", ["h4", "full"], ["hx"]),
        helper.make_node("Where", ["hx", "neg", "zero"], ["bias"]),
        helper.make_node("Gather", ["table", "ids"], ["emb"]),
        helper.make_node("MatMul", ["emb", "embT"], ["scores"]),
        helper.make_node("Unsqueeze", ["scores", "one"], ["s4"]),
        helper.make_node("Add", ["s4", "bias"], ["y"]),
    ]
    inits = {"pad_id": np.array(1, np.int64), "axes": np.array([1, 2], np.int64),
             "full": np.array([1, 1, 5, 5], np.int64), "one": np.array([1], np.int64),
             "neg": np.array(np.finfo(np.float32).min, np.float32),
             "zero": np.zeros((1, 1, 1), np.float32), "table": _f32(20, 8),
             "embT": _f32(8, 5)}
    m = _model(nodes, [vi("ids", I64, ["batch", 5]), vi("mask", I64, ["batch", 5])],
               [vi("y", F, ["batch", 1, 5, 5])], inits, opset=17)
    im = sonnx_io.load(m)
    for batch in (2, 3):
        ids = rng.integers(0, 20, (batch, 5)).astype(np.int64)
        mask = (rng.random((batch, 5)) > 0.3).astype(np.int64)
        want = _ort(m, {"ids": ids, "mask": mask})[0]
        np.testing.assert_allclose(im(ids, mask).to_numpy(), want, rtol=1e-6)


def test_einsum_with_an_output_label_no_operand_has_is_refused():
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Einsum", ["a"], ["y"], equation="ij->ik")], "g",
        [vi("a", F, [2, 3])], [vi("y", F, [2, 3])]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="output label 'k' that no operand has"):
        sonnx_io.load(m)(_f32(2, 3))


def test_a_shape_that_cannot_be_folded_names_the_fold_that_failed(monkeypatch):
    from singa_graph.onnx import folding

    def broken(inputs, attrs):
        raise ValueError("no fold today")

    monkeypatch.setitem(folding.FOLDERS, "GatherElements", broken)
    nodes = [helper.make_node("GatherElements", ["table", "idx"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    m = _model(nodes, [vi("x", F, [2, 4])], [vi("y", F, [4, 2])],
               {"table": np.array([4, 2, 8], np.int64), "idx": np.array([0, 1], np.int64)},
               opset=17)
    with pytest.raises(UnsupportedOpError, match="could not be folded: .*no fold today"):
        sonnx_io.load(m)(_f32(2, 4))
