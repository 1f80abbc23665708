"""bfloat16, float8, float4 and int4/int2 (ml_dtypes) through ONNX models: Cast's semantics
(round to nearest even, ``saturate``, NaN and infinity, float8_e8m0fnu's ``round_mode``) and
the quantisation ops, checked against onnx.reference on values chosen to hit every edge."""
import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from singa_graph import ops
from singa_graph.errors import DTypeError
from singa_graph.ir import dtypes
from singa_graph.onnx.backend import SingaBackend
from singa_graph.runtime import registry

# halfway cases, values beyond every float8 range, subnormals, signed zeros, NaN, infinities
EDGES = np.array([0.0, -0.0, 1.0, -1.0, 1.0625, 1.125, 1.1875, 3.5, 240.0, 248.0, 256.0,
                  448.0, 464.0, 480.0, 500.0, 57344.0, 61440.0, 1e6, -1e6, 2.0 ** -9,
                  2.0 ** -10, 2.0 ** -17, 1e-30, 0.3, -0.7, 6.0, 7.0, -8.5, 2.5, 1.5,
                  np.nan, np.inf, -np.inf], np.float32)

FLOAT8 = [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
          TensorProto.FLOAT8E5M2FNUZ]
NARROW = FLOAT8 + [TensorProto.BFLOAT16, TensorProto.FLOAT4E2M1, TensorProto.FLOAT8E8M0,
                   TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2]


def _model(node, x_type, y_type, n, opset=25):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, [n])],
                          [helper.make_tensor_value_info("y", y_type, [n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _both(model, x):
    ours = SingaBackend.prepare(model).run([x])[0]
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    return ours, ref


def _same(ours, ref):
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    assert np.array_equal(a, b, equal_nan=True), (a, b)
    # signed zeros too, where the format has them
    assert np.array_equal(np.signbit(a[~np.isnan(a)]), np.signbit(b[~np.isnan(b)]))


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("to", FLOAT8)
@pytest.mark.parametrize("src", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE])
def test_cast_into_float8_matches_reference(to, saturate, src):
    x = EDGES.astype(helper.tensor_dtype_to_np_dtype(src))
    node = helper.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate)
    with np.errstate(all="ignore"):
        _same(*_both(_model(node, src, to, x.size), x))


@pytest.mark.parametrize("mode", ["up", "nearest", "down"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_into_e8m0_rounds_as_asked(mode, saturate):
    x = np.array([1.0, 1.5, 3.0, 0.75, 2.0 ** 127 * 1.5, 2.0 ** -126, 1e-40, np.nan, np.inf,
                  2.0 ** 127, 5.0, 6.0], np.float32)
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0,
                            saturate=saturate, round_mode=mode)
    ours, ref = _both(_model(node, TensorProto.FLOAT, TensorProto.FLOAT8E8M0, x.size), x)
    assert ours.dtype == ref.dtype
    assert np.array_equal(ours.view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("to", NARROW)
def test_round_trip_through_float32(to):
    """Into the narrow type and back: what the narrow type keeps, exactly as the reference."""
    x = np.linspace(-9, 9, 37).astype(np.float32)
    n1 = helper.make_node("Cast", ["x"], ["t"], to=to)
    n2 = helper.make_node("Cast", ["t"], ["y"], to=TensorProto.FLOAT)
    g = helper.make_graph([n1, n2], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    with np.errstate(all="ignore"):
        _same(*_both(model, x))


@pytest.mark.parametrize("to", [TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2,
                                TensorProto.UINT2, TensorProto.FLOAT8E4M3FN,
                                TensorProto.FLOAT8E5M2, TensorProto.FLOAT4E2M1])
def test_quantize_dequantize_narrow_matches_reference(to):
    x = (EDGES[np.isfinite(EDGES)] / 40).astype(np.float32)
    zero = np.zeros((), helper.tensor_dtype_to_np_dtype(to))
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("z", to, [], zero.reshape(1).astype(np.float32).tolist())]
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])
    d = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])
    g = helper.make_graph([q, d], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                          [helper.make_tensor_value_info("q", to, [x.size]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])],
                          initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    ours = SingaBackend.prepare(model).run([x])
    ref = ReferenceEvaluator(model).run(None, {"x": x})
    for a, b in zip(ours, ref):
        _same(a, b)


def test_bfloat16_elementwise_rounds_once():
    """Add of bfloat16 computes in float32 and rounds the sum once, as ml_dtypes does."""
    a = np.array([1.0, 3.0, 1e-3, 255.0], ml_dtypes.bfloat16)
    b = np.array([2.0 ** -8, 2.0 ** -7, 1.0, 0.5], ml_dtypes.bfloat16)
    y = ops.add(a, b)
    want = (a.astype(np.float32) + b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert np.asarray(y.data).dtype == dtypes.bfloat16
    assert np.array_equal(np.asarray(y.data).view(np.uint16), want.view(np.uint16))


def test_gpu_kernels_refuse_narrow_dtypes():
    x = np.zeros(4, np.float32)
    y = np.zeros(4, ml_dtypes.float8_e4m3fn)
    with pytest.raises(DTypeError, match="float8_e4m3fn"):
        registry._refuse_narrow(ops.elementwise.Cast(y.dtype), [x], [y], "cuda")
    registry._refuse_narrow(ops.elementwise.Cast(y.dtype), [x], [y], "cpu")  # the CPU takes it


@pytest.mark.parametrize("saturate", [True, False])
def test_cast_exports_its_saturate_attribute(saturate):
    """A non-saturating Cast into float8 stays non-saturating through export."""
    from singa_graph import onnx as sg_onnx
    from singa_graph.ir import Graph, Placeholder

    x = Placeholder((EDGES.size,), np.float32, name="x")
    y = ops.cast(x, dtypes.float8_e4m3fn, saturate=saturate)
    proto = sg_onnx.export(Graph([y], inputs=[x]), opset=21)
    (node,) = [n for n in proto.graph.node if n.op_type == "Cast"]
    assert [a.i for a in node.attribute if a.name == "saturate"] == ([] if saturate else [0])
    got = ReferenceEvaluator(proto).run(None, {proto.graph.input[0].name: EDGES})[0]
    with np.errstate(all="ignore"):
        _same(ops.cast(EDGES, dtypes.float8_e4m3fn, saturate=saturate).to_numpy(), got)
    assert np.isnan(got.astype(np.float32)[EDGES == np.inf]).all() != saturate
