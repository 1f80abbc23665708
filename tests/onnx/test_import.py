"""Import: round trips, fine-tuning, dynamic batch, exporter-shaped graphs and opset forms,
each checked against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from singa_graph import opt, random as sg_random, zoo
from singa_graph import onnx as sonnx_io
from tests.helpers import onnx_model as _model

RNG = np.random.default_rng(0)


def _ort(proto, *xs):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _same_as_ort(proto, *xs, tol=1e-5):
    got = sonnx_io.load(proto)(*xs)
    got = list(got) if isinstance(got, tuple) else [got]
    for a, b in zip(_ort(proto, *xs), got):
        assert a.shape == b.shape
        assert np.abs(a - b.to_numpy()).max() < tol


def test_a_model_read_from_a_file_keeps_its_weights_once(tmp_path):
    # the weights live on as the parameters' arrays; the parsed protobuf keeps only the
    # initialisers' names, types and dims. A ModelProto the caller passes is left as it is.
    sg_random.seed(0)
    m = zoo.MLP(hidden=(32,))
    x = _f32(8, 20)
    m.compile([x], is_train=False)
    want = m(x).to_numpy()
    path = tmp_path / "m.onnx"
    sonnx_io.export(m, path)
    proto = onnx.load(str(path))
    before = proto.SerializeToString()
    for src in (str(path), path.read_bytes(), proto):
        im = sonnx_io.load(src)
        inits = im.program.graph.initializer
        assert [t.name for t in inits] == [t.name for t in proto.graph.initializer]
        assert [tuple(t.dims) for t in inits] == [tuple(t.dims) for t in
                                                  proto.graph.initializer]
        payload = sum(len(t.raw_data) + len(t.float_data) for t in inits)
        assert (payload > 0) == (src is proto)
        assert np.abs(im(x).to_numpy() - want).max() < 1e-6
    assert proto.SerializeToString() == before


@pytest.mark.parametrize("name", ["mlp", "resnet"])
def test_round_trip_and_fine_tuning(name, tmp_path):
    sg_random.seed(0)
    m, shape = {"mlp": (zoo.MLP(hidden=(32,)), (8, 20)),
                "resnet": (zoo.ResNet(widths=(4, 8)), (8, 1, 12, 12))}[name]
    x = _f32(*shape)
    y = RNG.integers(0, 10, shape[0]).astype(np.int32)
    m.compile([x], is_train=False)
    want = m(x).to_numpy()
    path = tmp_path / "m.onnx"
    sonnx_io.export(m, path, dynamic_batch=True)
    im = sonnx_io.load(str(path))
    assert np.abs(im(x).to_numpy() - want).max() < 1e-5
    assert set(im.get_params()) <= set(m.get_params())  # names survive the trip
    im.set_optimizer(opt.SGD(lr=0.05))
    im.train()
    losses = [im(x, y)[1].to_numpy().item() for _ in range(3)]
    assert losses[-1] < losses[0]
    im.eval()
    tuned = im(x).to_numpy()
    assert np.abs(tuned - want).max() > 1e-4  # the parameters moved
    again = sonnx_io.load(sonnx_io.export(im, dynamic_batch=True))  # re-export, no compile
    assert np.abs(again(x).to_numpy() - tuned).max() < 1e-5


def test_dynamic_batch_compiles_one_plan_per_size():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 3])], [_vi("y", ["N", 3])])
    im = sonnx_io.load(m)
    for n in (2, 5, 2):
        x = _f32(n, 3)
        assert np.array_equal(im(x).to_numpy(), np.maximum(x, 0))
    assert len(im.plans) == 2


def test_reshape_with_minus_one_and_zero():
    m = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [_vi("x", [2, 3, 4])],
               [_vi("y", [2, 3, 2, 2])], {"shape": np.array([0, 0, -1, 2], np.int64)})
    _same_as_ort(m, _f32(2, 3, 4))


def test_gemm_trans_b():
    w, b = _f32(5, 7), _f32(5)
    m = _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, alpha=0.5)],
               [_vi("x", ["N", 7])], [_vi("y", ["N", 5])], {"w": w, "b": b})
    _same_as_ort(m, _f32(3, 7))
    assert set(sonnx_io.load(m).get_params()) == set()  # created when first traced


def test_flatten_after_global_average_pool():
    m = _model([helper.make_node("GlobalAveragePool", ["x"], ["p"]),
                helper.make_node("Flatten", ["p"], ["y"], axis=1)],
               [_vi("x", [2, 3, 5, 5])], [_vi("y", [2, 3])])
    _same_as_ort(m, _f32(2, 3, 5, 5))


def test_shape_gather_unsqueeze_concat_reshape_chain_with_dynamic_batch():
    i64 = TensorProto.INT64
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", i64, [], [0])),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Constant", [], ["rest"], value=helper.make_tensor("r", i64, [1], [-1])),
        helper.make_node("Concat", ["n1", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["y"]),
    ]
    m = _model(nodes, [_vi("x", ["batch", 2, 3])], [_vi("y", ["batch", 4])],
               {"axes": np.array([0], np.int64), "w": _f32(6, 4)})
    im = sonnx_io.load(m)
    for n in (3, 6):
        x = _f32(n, 2, 3)
        assert np.abs(_ort(m, x)[0] - im(x).to_numpy()).max() < 1e-5


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_axes_as_attribute_or_input_by_opset(opset):
    """Squeeze/Unsqueeze take axes as an input since 13, ReduceMean since 18, Split its
    sizes since 13, Clip its bounds since 11."""
    inits = {}

    def axes(node_type, name, values, since):
        if opset >= since:
            inits[name] = np.array(values, np.int64)
            return {"inputs": [name]}
        return {"attrs": {"axes": values}}

    def node(op, ins, outs, spec=None, **attrs):
        spec = spec or {}
        return helper.make_node(op, ins + spec.get("inputs", []), outs,
                                **attrs, **spec.get("attrs", {}))

    split = ({"inputs": ["sizes"]} if opset >= 13 else {"attrs": {"split": [1, 2]}})
    if opset >= 13:
        inits["sizes"] = np.array([1, 2], np.int64)
    nodes = [
        node("Unsqueeze", ["x"], ["u"], axes("Unsqueeze", "ua", [0], 13)),
        node("Squeeze", ["u"], ["s"], axes("Squeeze", "sa", [0], 13)),
        node("Split", ["s"], ["a", "b"], split, axis=1),
        node("ReduceMean", ["b"], ["m"], axes("ReduceMean", "ma", [1], 18), keepdims=1),
        helper.make_node("Clip", ["a", "lo", "hi"], ["c"]),
        helper.make_node("Add", ["c", "m"], ["y"]),
    ]
    inits.update(lo=np.array(-0.5, np.float32), hi=np.array(0.5, np.float32))
    m = _model(nodes, [_vi("x", [4, 3])], [_vi("y", [4, 1])], inits, opset=opset)
    _same_as_ort(m, _f32(4, 3))


def test_conv_bn_pool_softmax_graph_as_exporters_write_it():
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c", "g", "beta", "mu", "var"], ["n"],
                         epsilon=1e-3, momentum=0.99),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2], auto_pad="SAME_UPPER"),
        helper.make_node("Flatten", ["a"], ["f"]),
        helper.make_node("Softmax", ["f"], ["y"], axis=-1),
    ]
    inits = {"w": _f32(4, 3, 3, 3), "b": _f32(4), "g": _f32(4), "beta": _f32(4), "mu": _f32(4),
             "var": np.abs(_f32(4)) + 0.5}
    m = _model(nodes, [_vi("x", ["N", 3, 9, 9])], [_vi("y", ["N", 16])], inits)
    _same_as_ort(m, _f32(2, 3, 9, 9))
    im = sonnx_io.load(m)
    assert set(im.get_params()) == set()
    im(_f32(2, 3, 9, 9))
    assert set(im.get_params()) == {"w", "b", "g", "beta"}  # mu/var are buffers
    assert set(im.get_states()) == {"w", "b", "g", "beta", "mu", "var"}


def test_tables_pick_the_form_of_the_models_opset():
    from singa_graph.onnx import import_shape, registry
    from singa_graph.onnx.pending import WAITING_FOR_OP_LIBRARY

    assert registry.find_importer("Squeeze", 11) is import_shape.squeeze_1
    assert registry.find_importer("Squeeze", 13) is import_shape.squeeze_13
    assert registry.find_importer("Squeeze", onnx.defs.onnx_opset_version()) is \
        import_shape.squeeze_13
    assert registry.find_importer("Bernoulli", 17) is None
    # the waiting list names ops without an import
    assert not set(WAITING_FOR_OP_LIBRARY) & set(registry.IMPORTERS)


def test_initialiser_names_with_any_characters_stay_parameter_names():
    m = _model([helper.make_node("MatMul", ["x", "_w:0/kernel"], ["y"])],
               [_vi("x", [2, 3])], [_vi("y", [2, 4])], {"_w:0/kernel": _f32(3, 4)})
    im = sonnx_io.load(m)
    im.set_optimizer(opt.SGD(lr=0.1))
    im.compile([_f32(2, 3)], is_train=True)
    assert list(im.get_params()) == ["_w:0/kernel"]
    before = im.get_params()["_w:0/kernel"].to_numpy()
    im(_f32(2, 3), np.array([0, 1], np.int32))
    assert np.abs(im.get_params()["_w:0/kernel"].to_numpy() - before).max() > 0


@pytest.mark.parametrize("opset", [11, 18])
def test_constant_pad_with_negative_pads_at_both_opset_forms(opset):
    inits = {"pads": np.array([0, 1, 2, -1] if opset < 18 else [1, -1], np.int64),
             "value": np.array(1.5, np.float32)}
    ins = ["x", "pads", "value"]
    if opset >= 18:
        inits["axes"] = np.array([1], np.int64)
        ins.append("axes")
        out = [2, 5]
    else:
        out = [4, 5]
    m = _model([helper.make_node("Pad", ins, ["y"])], [_vi("x", [2, 5])], [_vi("y", out)],
               inits, opset=opset)
    _same_as_ort(m, _f32(2, 5))


@pytest.mark.parametrize("opset,form", [(9, "upsample"), (13, "scales"), (19, "sizes")])
def test_nearest_resize_by_whole_factors(opset, form):
    if form == "upsample":
        node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")
        inits = {"scales": np.array([1, 1, 2, 3], np.float32)}
    elif form == "scales":
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
        inits = {"scales": np.array([1, 1, 2, 3], np.float32)}
    else:
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest",
                                coordinate_transformation_mode="asymmetric",
                                nearest_mode="floor")
        inits = {"sizes": np.array([2, 3, 8, 12], np.int64)}
    m = _model([node], [_vi("x", [2, 3, 4, 4])], [_vi("y", [2, 3, 8, 12])], inits,
               opset=opset)
    _same_as_ort(m, _f32(2, 3, 4, 4))


def test_graph_of_new_ops_fine_tunes():
    """Gradients flow through ConvTranspose, InstanceNormalization, reflect Pad, Gelu and the
    composed ReduceMax of an imported graph."""
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[2, 2],
                              pads=[1, 1, 0, 0], output_padding=[1, 1]),
             helper.make_node("InstanceNormalization", ["t", "s", "bb"], ["n"]),
             helper.make_node("Pad", ["n", "pads"], ["p"], mode="reflect"),
             helper.make_node("Gelu", ["p"], ["g"]),
             helper.make_node("ReduceMax", ["g", "axes"], ["m"], keepdims=0),
             helper.make_node("ReduceMean", ["m", "axes"], ["y"], keepdims=0)]
    inits = {"w": _f32(3, 4, 3, 3), "b": _f32(4), "s": _f32(4), "bb": _f32(4),
             "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
             "axes": np.array([2], np.int64)}
    m = _model(nodes, [_vi("x", [4, 3, 5, 5])], [_vi("y", [4, 4])], inits, opset=20)
    im = sonnx_io.load(m)
    im.set_optimizer(opt.SGD(lr=0.1))
    im.train()
    x, y = _f32(4, 3, 5, 5), RNG.integers(0, 4, 4).astype(np.int32)
    losses = [im(x, y)[1].to_numpy().item() for _ in range(4)]
    assert losses[-1] < losses[0]
    assert set(im.get_params()) == {"w", "b", "s", "bb"}
