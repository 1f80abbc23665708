"""Import of the ops added with the op library, in the forms and corners ONNX's backend node
tests leave out (opset forms, broadcasting, NaN, out-of-range indices, negative pads,
bidirectional and batch-first recurrences ...), each checked against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from singa_graph import onnx as sonnx_io
from singa_graph import opt
from singa_graph.errors import UnsupportedOpError
from singa_graph.onnx.backend import prepare

RNG = np.random.default_rng(0)
F, I32, I64, B = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL


def _vi(name, shape, dtype=F):
    if shape is None:
        t = helper.make_tensor_type_proto(dtype, None)
        t.tensor_type.ClearField("shape")
        return helper.make_value_info(name, t)
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs,
                          [numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 9)
    m = onnx.shape_inference.infer_shapes(m)  # outputs are declared without shapes
    onnx.checker.check_model(m)
    return m


def _ort(proto, *xs):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})


def _reference(proto, *xs):
    names = [i.name for i in proto.graph.input if i.name not in
             {t.name for t in proto.graph.initializer}]
    return ReferenceEvaluator(proto).run(None, dict(zip(names, xs)))


def _same_as_ort(proto, *xs, tol=1e-5, reference=False):
    """Our outputs match onnxruntime's (or, where it lacks the form, onnx.reference's)."""
    got = sonnx_io.load(proto)(*xs)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = (_reference if reference else _ort)(proto, *xs)
    assert len(got) == len(want)
    for a, b in zip(want, got):
        b = b.to_numpy() if hasattr(b, "to_numpy") else np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        if a.dtype.kind == "f":
            np.testing.assert_allclose(b, a, rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(b, a)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _unary(op, x, opset=17, out_dtype=F, **attrs):
    return _model([helper.make_node(op, ["x"], ["y"], **attrs)],
                  [_vi("x", list(x.shape), helper.np_dtype_to_tensor_dtype(x.dtype))],
                  [_vi("y", None, out_dtype)], opset=opset)


# ---------------------------------------------------------------------- elementwise


def test_comparisons_with_nan_and_broadcasting():
    a = np.array([[1, np.nan, 3, -np.inf, np.inf]], np.float32)
    b = np.array([[1], [np.nan], [4]], np.float32)
    ops_ = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]
    nodes = [helper.make_node(op, ["a", "b"], [op]) for op in ops_]
    nodes += [helper.make_node("IsNaN", ["a"], ["nan"]),
              helper.make_node("IsInf", ["a"], ["neginf"], detect_positive=0),
              helper.make_node("Where", ["nan", "b", "a"], ["w"])]
    outs = [_vi(op, None, B) for op in ops_ + ["nan", "neginf"]] + [_vi("w", None)]
    m = _model(nodes, [_vi("a", [1, 5]), _vi("b", [3, 1])], outs)
    _same_as_ort(m, a, b)


@pytest.mark.parametrize("opset", [6, 13])
def test_clip_max_min_of_integers(opset):
    x = RNG.integers(-10, 10, (3, 4)).astype(np.int32 if opset >= 13 else np.float32)
    dt = helper.np_dtype_to_tensor_dtype(x.dtype)
    if opset < 11:
        clip = helper.make_node("Clip", ["x"], ["c"], min=-3.0, max=4.0)
        inits = {}
    else:
        clip = helper.make_node("Clip", ["x", "lo", "hi"], ["c"])
        inits = {"lo": np.array(-3, x.dtype), "hi": np.array(4, x.dtype)}
    nodes = [clip, helper.make_node("Max", ["x", "c", "r"], ["mx"]),
             helper.make_node("Min", ["x", "r"], ["mn"])]
    # Max and Min broadcast since opset 8
    inits["r"] = np.arange(4 if opset >= 8 else 12).reshape(-1 if opset >= 8 else (3, 4))
    inits["r"] = inits["r"].astype(x.dtype)
    m = _model(nodes, [_vi("x", [3, 4], dt)], [_vi(n, None, dt) for n in ("c", "mx", "mn")],
               inits, opset=opset)
    _same_as_ort(m, x)


@pytest.mark.parametrize("op,attrs", [("Gelu", {}), ("Gelu", {"approximate": "tanh"}),
                                      ("Celu", {"alpha": 2.0}), ("Shrink", {"bias": 0.5}),
                                      ("ThresholdedRelu", {"alpha": 0.3}), ("Selu", {}),
                                      ("HardSigmoid", {"alpha": 0.3}), ("Softplus", {}),
                                      ("Mish", {}), ("HardSwish", {}), ("Erf", {}),
                                      ("Round", {}), ("Atan", {})])
def test_activations_and_math(op, attrs):
    x = _f32(4, 5) * 3
    x[0, :3] = [0.5, 1.5, -2.5]  # halves round to even
    _same_as_ort(_unary(op, x, opset=20, **attrs), x)


@pytest.mark.parametrize("opset", [11, 13])
def test_hardmax_coerces_to_2d_before_13_and_takes_the_first_maximum(opset):
    x = np.round(_f32(2, 3, 4))
    x[0, 0, :] = 1.0  # ties
    _same_as_ort(_unary("Hardmax", x, opset=opset, axis=1), x)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extremes_with_ties_on_integers(op, last):
    x = RNG.integers(-3, 3, (4, 6)).astype(np.int32)
    x[0, 0] = np.iinfo(np.int32).min  # -x overflows here; ArgMin must still find it
    m = _unary(op, x, out_dtype=I64, axis=1, keepdims=0, select_last_index=last)
    _same_as_ort(m, x)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceProd"])
def test_reduce_max_min_prod_at_both_axes_forms(op, opset):
    x = _f32(3, 7, 5)
    if opset >= 18:
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
        inits = {"axes": np.array([1, -1], np.int64)}
    else:
        node = helper.make_node(op, ["x"], ["y"], keepdims=0, axes=[1, -1])
        inits = {}
    m = _model([node], [_vi("x", [3, 7, 5])], [_vi("y", None)], inits, opset)
    _same_as_ort(m, x)
    # NaN propagates as in numpy, which the spec follows (onnxruntime skips it)
    x[1, 2, 3] = np.nan
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(sonnx_io.load(m)(x).to_numpy(), want, rtol=1e-5)


# ---------------------------------------------------------------------- data movement


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes_with_negative_pads_and_axes(mode):
    x = _f32(2, 5, 6)
    inits = {"pads": np.array([2, -1, 1, 3], np.int64), "axes": np.array([-1, 1], np.int64),
             "v": np.array(0.25, np.float32)}
    node = helper.make_node("Pad", ["x", "pads", "v", "axes"], ["y"], mode=mode)
    _same_as_ort(_model([node], [_vi("x", [2, 5, 6])], [_vi("y", None)], inits, 19), x)


def test_pad_reflect_as_long_as_the_axis_is_refused_clearly():
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")
    m = _model([node], [_vi("x", [2, 3])], [_vi("y", None)],
               {"pads": np.array([0, 3, 0, 0], np.int64)})
    with pytest.raises(UnsupportedOpError, match="reflect padding"):
        sonnx_io.load(m)(_f32(2, 3))


def test_slice_with_negative_steps_squeeze_unsqueeze_tile_and_blocks():
    x = _f32(1, 8, 4, 6)
    inits = {"s": np.array([-1, 5], np.int64), "e": np.array([-2 ** 63, 0], np.int64),
             "a": np.array([1, 3], np.int64), "st": np.array([-2, -2], np.int64),
             "sq": np.array([0], np.int64), "un": np.array([0, -1], np.int64),
             "rep": np.array([1, 2, 1, 3], np.int64)}
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["sl"]),
             helper.make_node("Squeeze", ["sl", "sq"], ["sq_"]),
             helper.make_node("Unsqueeze", ["sq_", "un"], ["un_"]),
             helper.make_node("Tile", ["x", "rep"], ["t"]),
             helper.make_node("DepthToSpace", ["x"], ["d2s"], blocksize=2, mode="CRD"),
             helper.make_node("SpaceToDepth", ["d2s"], ["s2d"], blocksize=2)]
    m = _model(nodes, [_vi("x", [1, 8, 4, 6])],
               [_vi(n, None) for n in ("un_", "t", "d2s", "s2d")], inits)
    _same_as_ort(m, x)


def test_squeeze_by_attribute_before_13():
    x = _f32(1, 3, 1, 2)
    _same_as_ort(_unary("Squeeze", x, opset=11, axes=[0, -2]), x)


def test_gather_with_run_time_and_constant_indices():
    x = _f32(5, 4)
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=0),
             helper.make_node("Gather", ["x", "c"], ["h"], axis=1),
             helper.make_node("GatherElements", ["x", "ge"], ["e"], axis=1),
             helper.make_node("ScatterElements", ["x", "ge", "u"], ["s"], axis=1)]
    inits = {"c": np.array([[-1, 0], [2, 2]], np.int64),
             "ge": np.array([[0, -1], [1, 2], [3, 3], [0, 0], [-4, 1]], np.int64),
             "u": _f32(5, 2)}
    m = _model(nodes, [_vi("x", [5, 4]), _vi("i", [2, 3], I64)],
               [_vi(n, None) for n in "ghes"], inits)
    im = sonnx_io.load(m)
    for idx in (np.array([[0, 4, -1], [2, 2, 3]], np.int64), np.array([[1] * 3] * 2)):
        got = [t.to_numpy() for t in im(x, idx)]
        for a, b in zip(_ort(m, x, idx), got):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("axis", [-1, 0])
def test_one_hot_leaves_out_of_range_indices_off(axis):
    idx = np.array([[0, 3, -1], [7, -5, 2]], np.int64)  # 7 and -5 are outside [-4, 4)
    node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=axis)
    m = _model([node], [_vi("i", [2, 3], I64)], [_vi("y", None, I64)],
               {"depth": np.array(4, np.int64), "values": np.array([-2, 9], np.int64)})
    _same_as_ort(m, idx)


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_with_k(upper):
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
    m = _model([node], [_vi("x", [2, 4, 5])], [_vi("y", None)], {"k": np.array(-1, np.int64)})
    _same_as_ort(m, _f32(2, 4, 5))


def test_range_with_fed_bounds_compiles_a_plan_per_value():
    node = helper.make_node("Range", ["a", "b", "d"], ["r"])
    add = helper.make_node("Add", ["r", "r"], ["y"])
    m = _model([node, add], [_vi(n, [], I64) for n in "abd"], [_vi("y", None, I64)])
    rep = prepare(m)
    for bounds in ((1, 10, 3), (5, -2, -2), (1, 10, 3)):
        (y,) = rep.run([np.array(v, np.int64) for v in bounds])
        np.testing.assert_array_equal(y, 2 * np.arange(*bounds))
    assert len(rep._plans) == 2


# ---------------------------------------------------------------------- layers


@pytest.mark.parametrize("attrs,spatial", [
    ({"strides": [2, 3], "pads": [1, 0, 0, 2], "output_padding": [1, 2], "group": 2}, 2),
    ({"strides": [2, 2], "dilations": [2, 1], "output_shape": [10, 8],
      "auto_pad": "SAME_UPPER"}, 2),
    ({"strides": [2, 2], "output_shape": [10, 9]}, 2),  # larger than the full output
    ({"strides": [3], "pads": [1, 2]}, 1)])
def test_conv_transpose(attrs, spatial):
    shape = [2, 4] + [5, 4][:spatial]
    w = _f32(4, 3, *[3, 2][:spatial])
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    b = _f32(3 * attrs.get("group", 1))
    m = _model([node], [_vi("x", shape)], [_vi("y", None)], {"w": w, "b": b})
    _same_as_ort(m, _f32(*shape), tol=1e-4)


def test_group_normalization():
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3,
                            epsilon=1e-3)
    m = _model([node], [_vi("x", [2, 6, 4, 3])], [_vi("y", [2, 6, 4, 3])],
               {"s": _f32(6), "b": _f32(6)}, 21)
    _same_as_ort(m, _f32(2, 6, 4, 3), tol=1e-4, reference=True)


def test_instance_lp_lrn_and_mean_variance_normalization():
    x = _f32(2, 5, 3, 4)
    x[0, :, 0, 0] = 0.0  # a zero vector: LpNormalization gives 0, not NaN
    nodes = [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["in"]),
             helper.make_node("LpNormalization", ["x"], ["l1"], axis=1, p=1),
             helper.make_node("LpNormalization", ["x"], ["l2"], axis=1, p=2),
             helper.make_node("LRN", ["x"], ["lrn"], size=3, alpha=0.01, beta=0.6, bias=2.0),
             helper.make_node("MeanVarianceNormalization", ["x"], ["mvn"], axes=[0, 2])]
    m = _model(nodes, [_vi("x", [2, 5, 3, 4])],
               [_vi(n, None) for n in ("in", "l1", "l2", "lrn", "mvn")],
               {"s": _f32(5), "b": _f32(5)})
    _same_as_ort(m, x, tol=1e-4)


def test_lrn_of_an_even_size():
    """onnxruntime takes odd sizes only, and onnx.reference sums over the wrong axis, so the
    spec's formula is written out: channels c - 1 ... c + 2 for size 4."""
    x = _f32(2, 5, 3, 4)
    node = helper.make_node("LRN", ["x"], ["y"], size=4, alpha=0.01, beta=0.6, bias=2.0)
    m = _model([node], [_vi("x", [2, 5, 3, 4])], [_vi("y", None)])
    sq = np.pad(x * x, [(0, 0), (1, 2), (0, 0), (0, 0)])
    window = sum(sq[:, k:k + 5] for k in range(4))
    want = x / (2.0 + 0.01 / 4 * window) ** 0.6
    np.testing.assert_allclose(sonnx_io.load(m)(x).to_numpy(), want, rtol=1e-5, atol=1e-6)


def _recurrent(op, gates, hidden=3, inputs=4, seq=5, batch=2, dirs=2, layout=0, peep=False,
               **attrs):
    names = ["x", "w", "r", "b", "", "h0"] + (["c0"] if op == "LSTM" else []) + \
        (["p"] if peep else [])
    inits = {"w": _f32(dirs, gates * hidden, inputs) * 0.5,
             "r": _f32(dirs, gates * hidden, hidden) * 0.5,
             "b": _f32(dirs, 2 * gates * hidden) * 0.5}
    if peep:
        inits["p"] = _f32(dirs, 3 * hidden)
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    direction = "bidirectional" if dirs == 2 else attrs.pop("direction", "forward")
    node = helper.make_node(op, names, outs, hidden_size=hidden, layout=layout,
                            direction=direction, **attrs)
    xs = [seq, batch, inputs] if not layout else [batch, seq, inputs]
    ins = [_vi("x", xs), _vi("h0", state)] + ([_vi("c0", state)] if op == "LSTM" else [])
    m = _model([node], ins, [_vi(o, None) for o in outs], inits)
    feeds = [_f32(*xs), _f32(*state)] + ([_f32(*state)] if op == "LSTM" else [])
    return m, feeds


@pytest.mark.parametrize("case", [
    dict(layout=1), dict(dirs=1, direction="reverse", peep=True),
    dict(dirs=1, input_forget=1), dict(activations=["HardSigmoid", "Relu", "Tanh"] * 2,
                                       activation_alpha=[0.3, 0.1], clip=2.0)])
def test_lstm(case):
    m, feeds = _recurrent("LSTM", 4, **case)
    # onnxruntime has no batch-first (layout=1) recurrences
    _same_as_ort(m, *feeds, tol=1e-4, reference=bool(case.get("layout")))


@pytest.mark.parametrize("case", [dict(linear_before_reset=1), dict(layout=1, dirs=1),
                                  dict(activations=["Sigmoid", "Softsign"] * 2)])
def test_gru(case):
    m, feeds = _recurrent("GRU", 3, **case)
    _same_as_ort(m, *feeds, tol=1e-4, reference=bool(case.get("layout")))


@pytest.mark.parametrize("case", [dict(), dict(activations=["Relu", "LeakyRelu"],
                                               activation_alpha=[0.2], clip=1.5)])
def test_rnn(case):
    m, feeds = _recurrent("RNN", 1, **case)
    _same_as_ort(m, *feeds, tol=1e-4)


def test_imported_lstm_fine_tunes():
    """The fused LSTM cell trains inside an imported graph: a few SGD steps lower the loss."""
    m, _ = _recurrent("LSTM", 4, dirs=1, batch=6, hidden=5)
    nodes = list(m.graph.node) + [
        helper.make_node("Reshape", ["y_h", "shape"], ["out"])]
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    inits["shape"] = np.array([6, 5], np.int64)
    model = _model(nodes, [_vi("x", [5, 6, 4])], [_vi("out", [6, 5])],
                   {**inits, "h0": np.zeros((1, 6, 5), np.float32),
                    "c0": np.zeros((1, 6, 5), np.float32)})
    im = sonnx_io.load(model)
    im.set_optimizer(opt.SGD(lr=0.5))
    im.train()
    x, y = _f32(5, 6, 4), RNG.integers(0, 5, 6).astype(np.int32)
    losses = [im(x, y)[1].to_numpy().item() for _ in range(5)]
    assert losses[-1] < losses[0]


# ---------------------------------------------------------------------- losses


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_with_weights_and_an_ignore_index_outside_the_classes(op, reduction):
    x = _f32(3, 4, 2)
    t = np.array([[0, 3], [-7, 1], [2, -7]], np.int64)
    outs = ["loss"] + (["logp"] if op == "SoftmaxCrossEntropyLoss" else [])
    node = helper.make_node(op, ["x", "t", "w"], outs, reduction=reduction, ignore_index=-7)
    m = _model([node], [_vi("x", [3, 4, 2]), _vi("t", [3, 2], I64)],
               [_vi(o, None) for o in outs], {"w": np.abs(_f32(4)) + 0.1})
    _same_as_ort(m, x, t, tol=1e-5)
