"""Pooling with ``ceil_mode``: output sizes, forward values against PyTorch and
onnxruntime, float64 finite-difference gradients, graph == eager, the 2x2 fast path and the
fused ReLU backward on partial windows, the layer API and the ONNX round trip. The
comparisons with PyTorch are left out where it is not installed."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import singa_graph as sg
from singa_graph import autograd, layer, ops
from singa_graph.ops.pool import pool_out_size
from helpers import check_grad, eager, graph_matches_eager

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the onnxruntime comparisons still run
    torch = F = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
rng = np.random.default_rng(18)

# (kernel, stride, symmetric padding, H, W): odd sizes, strides 2 and 3, pads; each keeps a
# partial last window along at least one axis (checked below)
CASES = [(3, 2, 0, 7, 8), (3, 2, 0, 8, 9), (2, 2, 0, 7, 5), (3, 2, 1, 6, 8), (3, 3, 1, 7, 9),
         (3, 3, 0, 8, 10), (2, 3, 0, 7, 8), ((3, 2), (2, 3), (1, 0), 9, 7), (4, 3, 2, 9, 8)]


def _torch(name, x, k, s, p, **kw):
    """PyTorch's ``max_pool2d`` / ``avg_pool2d`` with ceil_mode, or None without PyTorch."""
    if torch is None:
        return None
    return getattr(F, name)(torch.from_numpy(x), k, s, p, ceil_mode=True, **kw).numpy()


def _ort(kind, x, k, s, pads, **attrs):
    """onnxruntime's MaxPool / AveragePool with ceil_mode=1, in float32 (its AveragePool
    has no float64 kernel)."""
    node = helper.make_node(kind, ["x"], ["y"], kernel_shape=list(k), strides=list(s),
                            pads=list(pads), ceil_mode=1, **attrs)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x.astype(np.float32)})[0]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("case", CASES)
def test_cases_keep_a_partial_window(case):
    k, s, p, h, w = case
    (kh, kw), (sh, sw), (ph, pw) = _pair(k), _pair(s), _pair(p)
    floor = (pool_out_size(h, kh, sh, ph, ph), pool_out_size(w, kw, sw, pw, pw))
    ceil = ops.MaxPool2d(k, s, p, ceil_mode=True).output_shape((1, 1, h, w))[2:]
    assert ceil != floor


def test_output_size_rule():
    # floor, ceil, and the ceil window that would start in the trailing padding is dropped
    assert pool_out_size(7, 3, 2, 0, 0) == 3 and pool_out_size(8, 3, 2, 0, 0, True) == 4
    assert pool_out_size(2, 1, 2, 0, 0, True) == 1  # ONNX's "output size reduce by one"
    assert pool_out_size(2, 3, 3, 1, 1, True) == 1  # ONNX's "last window starts on pad"
    assert pool_out_size(5, 3, 3, 1, 1, True) == 2  # would start at 5 = n + p0: dropped


@needs_torch
def test_output_size_rule_matches_torch():
    for n in range(1, 12):
        for k in range(1, 5):
            for s in range(1, 4):
                for p in range(0, (k + 1) // 2):
                    if n + 2 * p < k:
                        continue
                    want = F.max_pool2d(torch.zeros(1, 1, 1, n), (1, k), (1, s), (0, p),
                                        ceil_mode=True).shape[3]
                    assert pool_out_size(n, k, s, p, p, True) == want, (n, k, s, p)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_max_pool_matches_torch_and_onnxruntime(case, dtype):
    k, s, p, h, w = case
    x = rng.standard_normal((2, 3, h, w)).astype(dtype)
    got = eager(lambda t: ops.max_pool2d(t, k, s, p, ceil_mode=True), x)
    want = _torch("max_pool2d", x, k, s, p)
    if want is not None:
        np.testing.assert_array_equal(got, want)
    (ph, pw) = _pair(p)
    ref = _ort("MaxPool", x, _pair(k), _pair(s), (ph, pw, ph, pw))
    np.testing.assert_array_equal(got.astype(np.float32), ref)


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_avg_pool_matches_torch_and_onnxruntime(case, include):
    k, s, p, h, w = case
    x = rng.standard_normal((2, 3, h, w))
    got = eager(lambda t: ops.avg_pool2d(t, k, s, p, include, ceil_mode=True), x)
    want = _torch("avg_pool2d", x, k, s, p, count_include_pad=include)
    if want is not None:
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)
    (ph, pw) = _pair(p)
    ref = _ort("AveragePool", x, _pair(k), _pair(s), (ph, pw, ph, pw),
               count_include_pad=int(include))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("include", [0, 1])
def test_asymmetric_pads_match_onnxruntime(include):
    # PyTorch pads symmetrically; ONNX pads may differ per side
    x = rng.standard_normal((1, 2, 8, 7)).astype(np.float32)
    for k, s, pads in [((3, 3), (2, 3), (1, 0, 0, 2)), ((3, 2), (3, 2), (0, 1, 2, 0))]:
        got = eager(lambda t: ops.max_pool2d(t, k, s, pads, ceil_mode=True), x)
        np.testing.assert_array_equal(got, _ort("MaxPool", x, k, s, pads))
        got = eager(lambda t: ops.avg_pool2d(t, k, s, pads, bool(include), ceil_mode=True), x)
        np.testing.assert_allclose(got, _ort("AveragePool", x, k, s, pads,
                                             count_include_pad=include), rtol=1e-5, atol=1e-6)


def distinct(shape):
    """Values without ties, so max pooling is differentiable everywhere."""
    return rng.permutation(np.prod(shape)).reshape(shape) / 7.0 - 3.0


@pytest.mark.parametrize("case", CASES[:5])
def test_gradients(case):
    k, s, p, h, w = case
    x = distinct((1, 2, h, w))
    check_grad(lambda t: ops.max_pool2d(t, k, s, p, ceil_mode=True), x)
    check_grad(lambda t: ops.avg_pool2d(t, k, s, p, ceil_mode=True), x)
    check_grad(lambda t: ops.avg_pool2d(t, k, s, p, True, ceil_mode=True), x)


def test_avg_pool_grad_is_differentiable():
    op = ops.AvgPool2dGrad(3, 2, 1, True, x_shape=(1, 2, 6, 8), ceil_mode=True)
    check_grad(lambda t: op(t), rng.standard_normal((1, 2, 4, 5)))


@pytest.mark.parametrize("case", CASES[:4])
def test_graph_matches_eager(case):
    k, s, p, h, w = case
    x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
    graph_matches_eager(lambda t: ops.max_pool2d(t, k, s, p, ceil_mode=True), x)
    graph_matches_eager(lambda t: ops.avg_pool2d(t, k, s, p, True, ceil_mode=True), x)
    # a ReLU before the max pooling: the plan folds the ReLU's backward into the pooling's
    graph_matches_eager(lambda t: ops.max_pool2d(ops.relu(t), k, s, p, ceil_mode=True), x)


def test_plan_fuses_relu_backward_into_ceil_max_pool():
    from singa_graph.ir import Graph, Placeholder, building
    from singa_graph.ir.tensor import Parameter
    from singa_graph.passes import compile
    from singa_graph.passes.autodiff import autodiff

    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    with building():
        p = Parameter(data=x.copy())
        y = ops.max_pool2d(ops.relu(p), 3, 2, ceil_mode=True)
        g = Graph([y])
        g.add_outputs(autodiff(g, ops.sum(y))[p])
    plan = compile(g)
    fused = [n for n in plan.graph.nodes if n.type == "MaxPool2dGrad"]
    assert [n.op.relu for n in fused] == [True] and fused[0].op.ceil_mode
    if torch is None:
        return
    t = torch.from_numpy(x).requires_grad_()
    F.max_pool2d(torch.relu(t), 3, 2, ceil_mode=True).sum().backward()
    np.testing.assert_array_equal(plan.run({})[1], t.grad.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_2x2_partial_windows_and_fused_relu_backward(dtype):
    # odd sizes: the 2x2 / stride 2 loops must step aside for the general (clipping) one
    z = np.maximum(rng.standard_normal((2, 3, 7, 9)), 0).astype(dtype)
    z[0, 0, 6, 8] = 5.0  # the lone cell of the last, 1x1 window
    dy = rng.standard_normal((2, 3, 4, 5)).astype(dtype)
    y = eager(lambda t: ops.max_pool2d(t, 2, ceil_mode=True), z)
    want = _ort("MaxPool", z, (2, 2), (2, 2), (0,) * 4)
    np.testing.assert_array_equal(y.astype(np.float32), want)
    got = eager(lambda d, t: ops.MaxPool2dGrad(2, relu=True, ceil_mode=True)(d, t), dy, z)
    plain = eager(lambda d, t: ops.MaxPool2dGrad(2, ceil_mode=True)(d, t), dy, z)
    want = eager(lambda d, t: ops.ReLUGrad()(ops.MaxPool2dGrad(2, ceil_mode=True)(d, t), t),
                 dy, z)
    np.testing.assert_array_equal(got, want)
    assert plain[0, 0, 6, 8] == dy[0, 0, 3, 4]
    if torch is None:
        return
    # against PyTorch's autograd (no ties: random floats)
    t = torch.from_numpy(z).requires_grad_()
    F.max_pool2d(t, 2, ceil_mode=True).backward(torch.from_numpy(dy))
    np.testing.assert_array_equal(plain, t.grad.numpy())


def test_layers_take_ceil_mode():
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    mx = layer.MaxPool2d(3, 2, ceil_mode=True)
    av = layer.AvgPool2d(3, 2, 1, ceil_mode=True)
    got = sg.tensor.to_numpy(mx(sg.tensor.from_numpy(x)))
    np.testing.assert_array_equal(got, _ort("MaxPool", x, (3, 3), (2, 2), (0,) * 4))
    got = sg.tensor.to_numpy(av(sg.tensor.from_numpy(x)))
    want = _ort("AveragePool", x, (3, 3), (2, 2), (1,) * 4, count_include_pad=0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert autograd.MaxPool2d(3, 2, 0, "NOTSET", True).ceil_mode  # SINGA's order kept
    assert not layer.MaxPool2d(3, 2).ceil_mode
    row = np.zeros((2, 3, 1, 8), np.float32)
    assert layer.MaxPool1d(3, 2, ceil_mode=True)(sg.tensor.from_numpy(row)).shape == (2, 3, 1, 4)
    assert layer.AvgPool1d(3, 2)(sg.tensor.from_numpy(row)).shape == (2, 3, 1, 3)


def test_onnx_round_trip():
    from singa_graph import onnx as sonnx
    from singa_graph.ir import Graph, Placeholder

    x = rng.standard_normal((2, 3, 8, 9)).astype(np.float32)
    fns = [lambda t: ops.max_pool2d(t, 3, 2, ceil_mode=True),
           # 8 rows at kernel 3, stride 3, pads 1: a 4th window would start in the trailing
           # padding, which onnxruntime drops but ONNX's shape inference counts; columns
           # gain a window. Written with a trailing row pad of 0: the same windows
           lambda t: ops.avg_pool2d(t, 3, 3, 1, True, ceil_mode=True),
           # rows as above, and columns without a partial window: written in floor mode
           lambda t: ops.avg_pool2d(t, 3, (3, 2), 1, True, ceil_mode=True)]
    ph = Placeholder(x.shape, x.dtype, name="x")
    proto = sonnx.export(Graph([f(ph) for f in fns], inputs=[ph]), opset=17)
    attrs = [{a.name: helper.get_attribute_value(a) for a in n.attribute}
             for n in proto.graph.node]
    assert [a.get("ceil_mode", 0) for a in attrs] == [1, 1, 0]
    assert attrs[1]["pads"] == [1, 1, 0, 1]
    want = [eager(f, x) for f in fns]
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, w in zip(sess.run(None, {"x": x}), want):
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-7)
    # imported back: ops of the same windows, so the same kernels and bits
    for got, w in zip(sonnx.load(proto)(x), want):
        np.testing.assert_array_equal(got.to_numpy(), w)


def test_export_refuses_what_onnx_shape_inference_miscounts():
    from singa_graph import onnx as sonnx
    from singa_graph.ir import Graph, Placeholder

    # rows: kernel 1, stride 2 over 2 rows keeps 1 window (ONNX's inference says 2) and no
    # padding can fix that; columns gain a window, so floor mode cannot be written either
    ph = Placeholder((1, 1, 2, 5), np.float32, name="x")
    y = ops.max_pool2d(ph, (1, 2), 2, ceil_mode=True)
    assert y.shape == (1, 1, 1, 3)
    with pytest.raises(sg.UnsupportedOpError, match="ceil_mode"):
        sonnx.export(Graph([y], inputs=[ph]), opset=17)
