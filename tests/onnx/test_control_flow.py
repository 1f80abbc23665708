"""Control flow (If, Loop, Scan) and sequences imported from ONNX, checked against
onnxruntime: a data-dependent loop scripted in PyTorch, a Scan RNN, loops with scan
outputs, run-time Ifs, and what the static planner refuses."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa_graph import onnx as sonnx_io
from singa_graph.errors import UnsupportedOpError
from singa_graph.onnx.backend import SingaBackend
from singa_graph.passes.verify import verify
from tests.helpers import onnx_model as _model

RNG = np.random.default_rng(0)


def _ort(proto, *xs):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _close(want, got, tol=1e-5):
    assert len(want) == len(got)
    for a, b in zip(want, got):
        b = np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        assert np.abs(a.astype(np.float64) - b).max() <= tol * (1 + np.abs(a).max())


def _torch_while_loop():
    """``while |y|.sum() < 100 and i < n: y = 1.5 y + 1``: the trip count depends on the
    data and on the input n; the condition is an If inside the body reading n from two
    scopes out."""
    torch = pytest.importorskip("torch")

    class M(torch.nn.Module):
        def forward(self, x, n):
            y = x
            i = torch.zeros((), dtype=torch.long)
            while bool(y.abs().sum() < 100.0) and bool(i < n):
                y = y * 1.5 + 1.0
                i = i + 1
            return y, i

    f = io.BytesIO()
    torch.onnx.export(torch.jit.script(M()), (torch.randn(2, 3), torch.tensor(50)), f,
                      dynamo=False, input_names=["x", "n"], output_names=["y", "i"],
                      opset_version=17)
    return onnx.load_from_string(f.getvalue())


def test_torch_scripted_data_dependent_loop_matches_ort():
    proto = _torch_while_loop()
    assert "Loop" in {n.op_type for n in proto.graph.node}
    m = sonnx_io.load(proto)
    trips = set()
    for scale, n in [(0.1, 50), (3.0, 50), (0.01, 3), (100.0, 50), (0.5, 0)]:
        x = (RNG.standard_normal((2, 3)) * scale).astype(np.float32)
        n = np.array(n, np.int64)
        want = _ort(proto, x, n)
        got = m(x, n)
        _close(want, [t.to_numpy() for t in got])
        trips.add(int(want[1]))
    assert len(trips) >= 4  # the same plan ran different trip counts
    plan = m.last_plan
    loop = next(n for n in plan.nodes if n.type == "Loop")  # a plan, not an unrolled loop
    assert "If" in {b.type for b in loop.op.body.graph.nodes}  # nested: If in the body
    verify(plan)
    verify(loop.op.body.memory)
    assert plan.memory_report()["workspace_peak_bytes"] > 0  # body arena, carried state


def test_torch_loop_through_the_backend_and_eagerly():
    proto = _torch_while_loop()
    x, n = (RNG.standard_normal((2, 3)) * 0.3).astype(np.float32), np.array(7, np.int64)
    want = _ort(proto, x, n)
    _close(want, SingaBackend.prepare(proto).run([x, n]))
    m = sonnx_io.load(proto)
    m.graph_mode = False
    _close(want, [t.to_numpy() for t in m(x, n)])


def _scan_rnn(t=5, batch=3, d=4, h=6, reverse=0):
    """An Elman RNN as a Scan: h' = tanh(x W + h R + b); the weights are outer-scope
    initialisers the body reads."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "W"], ["xw"]),
         helper.make_node("MatMul", ["h_in", "R"], ["hr"]),
         helper.make_node("Add", ["xw", "hr"], ["s0"]),
         helper.make_node("Add", ["s0", "b"], ["s1"]),
         helper.make_node("Tanh", ["s1"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["y_t"])],
        "rnn_body", [_vi("h_in", [batch, h]), _vi("x_t", [batch, d])],
        [_vi("h_out", [batch, h]), _vi("y_t", [batch, h])])
    node = helper.make_node("Scan", ["h0", "xs"], ["h_last", "ys"], body=body,
                            num_scan_inputs=1, scan_input_directions=[reverse])
    inits = {"W": RNG.standard_normal((d, h)).astype(np.float32) * 0.5,
             "R": RNG.standard_normal((h, h)).astype(np.float32) * 0.5,
             "b": RNG.standard_normal((h,)).astype(np.float32)}
    return _model([node], [_vi("h0", [batch, h]), _vi("xs", [t, batch, d])],
                  [_vi("h_last", [batch, h]), _vi("ys", [t, batch, h])], inits)


@pytest.mark.parametrize("reverse", [0, 1])
def test_scan_rnn_matches_ort(reverse):
    proto = _scan_rnn(reverse=reverse)
    h0 = RNG.standard_normal((3, 6)).astype(np.float32)
    xs = RNG.standard_normal((5, 3, 4)).astype(np.float32)
    m = sonnx_io.load(proto)
    _close(_ort(proto, h0, xs), [t.to_numpy() for t in m(h0, xs)])
    # the parent plan holds every byte: the body's arena, two copies of the state, one
    # element in and one out are its Scan's workspace
    r = m.last_plan.memory_report()
    body = next(n.op.body for n in m.last_plan.nodes if n.type == "Scan")
    state, elem_in = 3 * 6 * 4, 3 * 4 * 4
    assert r["workspace_peak_bytes"] >= body.arena_bytes + 2 * state + elem_in + state
    verify(m.last_plan)
    verify(body.memory)


def _loop_with_scan_outputs(trip=4):
    """for i in range(trip): acc += x * i; emit acc (M and the condition are constants)."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("Add", ["acc_in", "xi"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Relu", ["acc_out"], ["emit"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
                 _vi("acc_in", [2, 3])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [2, 3]), _vi("emit", [2, 3])])
    nodes = [helper.make_node("Constant", [], ["M"], value=numpy_helper.from_array(
                 np.array(trip, np.int64))),
             helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
                 np.array(True))),
             helper.make_node("Loop", ["M", "c", "acc0"], ["acc", "emits"], body=body)]
    return _model(nodes, [_vi("x", [2, 3]), _vi("acc0", [2, 3])],
                  [_vi("acc", [2, 3]), _vi("emits", [trip, 2, 3])])


@pytest.mark.parametrize("trip", [1, 4, 5])
def test_loop_scan_outputs_are_planned_for_a_known_trip_count(trip):
    proto = _loop_with_scan_outputs(trip)
    x, a0 = RNG.standard_normal((2, 3)).astype(np.float32), np.zeros((2, 3), np.float32)
    m = sonnx_io.load(proto)
    _close(_ort(proto, x, a0), [t.to_numpy() for t in m(x, a0)])
    loop = next(n for n in m.last_plan.nodes if n.type == "Loop")
    assert loop.outputs[1].shape == (trip, 2, 3)  # a planned buffer of the parent


def test_if_on_a_run_time_condition_runs_one_branch_plan():
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                               [_vi("t", [4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [_vi("e", [4])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Constant", [], ["z"], value=numpy_helper.from_array(
                 np.array(0, np.float32))),
             helper.make_node("Greater", ["s", "z"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    proto = _model(nodes, [_vi("x", [4])], [_vi("y", [4])])
    m = sonnx_io.load(proto)
    for sign in (1, -1):
        x = (np.abs(RNG.standard_normal(4)) * sign).astype(np.float32)
        _close(_ort(proto, x), [m(x).to_numpy()])


def test_scan_outputs_of_a_run_time_length_are_refused():
    # the body decides when to stop, and the loop emits a scan output
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "v_in"], ["v_out"]),
         helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
         helper.make_node("Constant", [], ["lim"], value=numpy_helper.from_array(
             np.array(10, np.float32))),
         helper.make_node("Less", ["s", "lim"], ["cond_out"]),
         helper.make_node("Identity", ["v_out"], ["emit"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
                 _vi("v_in", [2])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out", [2]), _vi("emit", [2])])
    nodes = [helper.make_node("Constant", [], ["M"], value=numpy_helper.from_array(
                 np.array(100, np.int64))),
             helper.make_node("Loop", ["M", "", "v0"], ["v", "emits"], body=body)]
    proto = _model(nodes, [_vi("v0", [2])], [_vi("v", [2]), _vi("emits", [None, 2])])
    with pytest.raises(UnsupportedOpError, match="scan outputs"):
        sonnx_io.load(proto)(np.ones(2, np.float32))


def test_sequences_split_and_concat_run_time_data():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], axis=1, keepdims=0),
             helper.make_node("SequenceErase", ["seq"], ["seq2"]),
             helper.make_node("SequenceLength", ["seq2"], ["n"]),
             helper.make_node("ConcatFromSequence", ["seq2"], ["y"], axis=0, new_axis=1)]
    proto = _model(nodes, [_vi("x", [2, 3])],
                   [_vi("y", [2, 2]), _vi("n", [], TensorProto.INT64)])
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    got = sonnx_io.load(proto)(x)
    _close(_ort(proto, x), [t.to_numpy() for t in got])


def test_sequence_position_computed_at_run_time_is_refused():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0),
             helper.make_node("ArgMax", ["v"], ["p"], keepdims=0),
             helper.make_node("SequenceAt", ["seq", "p"], ["y"])]
    proto = _model(nodes, [_vi("x", [3, 2]), _vi("v", [3])], [_vi("y", [1, 2])])
    with pytest.raises(UnsupportedOpError, match="SequenceAt.*run time"):
        sonnx_io.load(proto)(np.ones((3, 2), np.float32), np.ones(3, np.float32))


def test_gradients_through_control_flow_are_refused():
    from singa_graph import autograd, ops
    from singa_graph.ir.tensor import Tensor
    from singa_graph.onnx.imported import Initializers
    from singa_graph.onnx.program import Program

    proto = _scan_rnn()
    h0 = Tensor(data=RNG.standard_normal((3, 6)).astype(np.float32), requires_grad=False)
    xs = Tensor(data=RNG.standard_normal((5, 3, 4)).astype(np.float32), requires_grad=False)
    store = Initializers()
    _, ys = Program(proto).trace({"h0": h0, "xs": xs}, store, training=True)
    assert ys.creator is not None and ys.creator.type == "Scan"  # W, R, b are its inputs
    with pytest.raises(UnsupportedOpError, match="gradients through control flow"):
        autograd.gradients(ops.sum(ys))


def test_loop_carrying_an_optional_sequence_matches_the_reference():
    """ONNX's test_loop16_seq_none, which onnx's runner cannot compare (its sequence holds
    a 0-d tensor): unrolled, with an If on an optional inside the body."""
    import warnings

    from onnx.backend.test.loader import load_model_tests
    from onnx.reference import ReferenceEvaluator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case = next(t for t in load_model_tests(kind="node")
                    if t.name == "test_loop16_seq_none")
    ins = [np.array(5, np.int64), np.array(True), None]
    want = ReferenceEvaluator(case.model).run(
        None, dict(zip([i.name for i in case.model.graph.input], ins)))[0]
    got = SingaBackend.prepare(case.model).run(ins)[0]
    assert len(got) == len(want) == 6
    for a, b in zip(want, got):
        assert a.shape == b.shape and np.array_equal(a, b)


def test_scan_along_other_axes_and_backwards_matches_ort():
    """Scanned input along axis 1, read backwards; the scan output stacked along axis 1 and
    written backwards; the body reads an outer value computed by the graph."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["x_t", "w"], ["xw"]),
         helper.make_node("Add", ["acc_in", "xw"], ["acc_out"]),
         helper.make_node("Sigmoid", ["acc_out"], ["y_t"])],
        "body", [_vi("acc_in", [3]), _vi("x_t", [3])], [_vi("acc_out", [3]), _vi("y_t", [3])])
    nodes = [helper.make_node("Exp", ["v"], ["w"]),
             helper.make_node("Scan", ["a0", "xs"], ["a", "ys"], body=body, num_scan_inputs=1,
                              scan_input_axes=[1], scan_input_directions=[1],
                              scan_output_axes=[1], scan_output_directions=[1])]
    proto = _model(nodes, [_vi("v", [3]), _vi("a0", [3]), _vi("xs", [3, 7])],
                   [_vi("a", [3]), _vi("ys", [3, 7])])
    v, a0 = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    xs = RNG.standard_normal((3, 7)).astype(np.float32)
    m = sonnx_io.load(proto)
    _close(_ort(proto, v, a0, xs), [t.to_numpy() for t in m(v, a0, xs)])
    scan = next(n for n in m.last_plan.nodes if n.type == "Scan")
    assert len(scan.inputs) == 3  # a0, xs and the outer value w


def test_loop_nested_in_a_scan_body_matches_ort():
    """Each Scan step runs a Loop (3 iterations of h = tanh(h * x_t + 0.5)): the inner
    Loop's workspace lies in the Scan body's arena, which lies in the parent's."""
    inner = helper.make_graph(
        [helper.make_node("Mul", ["h_in", "x_t"], ["hx"]),
         helper.make_node("Add", ["hx", "half"], ["hs"]),
         helper.make_node("Tanh", ["hs"], ["h_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "inner", [_vi("j", [], TensorProto.INT64), _vi("c_in", [], TensorProto.BOOL),
                  _vi("h_in", [4])],
        [_vi("c_out", [], TensorProto.BOOL), _vi("h_out", [4])])
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["three"], value=numpy_helper.from_array(
             np.array(3, np.int64))),
         helper.make_node("Loop", ["three", "", "s_in"], ["s_out"], body=inner),
         helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body", [_vi("s_in", [4]), _vi("x_t", [4])], [_vi("s_out", [4]), _vi("y_t", [4])])
    nodes = [helper.make_node("Constant", [], ["half"], value=numpy_helper.from_array(
                 np.array(0.5, np.float32))),
             helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1)]
    proto = _model(nodes, [_vi("s0", [4]), _vi("xs", [6, 4])], [_vi("s", [4]), _vi("ys", [6, 4])])
    s0, xs = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal((6, 4)).astype(
        np.float32)
    m = sonnx_io.load(proto)
    _close(_ort(proto, s0, xs), [t.to_numpy() for t in m(s0, xs)])
    scan = next(n for n in m.last_plan.nodes if n.type == "Scan").op
    assert "Loop" in {n.type for n in scan.body.graph.nodes}
    assert scan.body.memory.report()["workspace_peak_bytes"] > 0  # the Loop's, in the body
    verify(scan.body.memory)

