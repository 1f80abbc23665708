"""Inference-graph passes (passes/inference.py): dropped no-ops and fused convolution
epilogues give the unoptimised graph's values bit for bit; BatchNorms folded into
convolutions stay within the documented bound (``|y - ref| <= 1e-4 * max|ref| + 1e-5``) and
are recomputed when the parameters change."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from singa_graph import ops, opt, zoo
from singa_graph import random as sg_random
from singa_graph.ir import Graph, Placeholder
from singa_graph.ir.tensor import Tensor
from singa_graph.passes import compile, verify

comp = sys.modules["singa_graph.passes.compile"]  # the module, not the function


def _const(a):
    return Tensor(data=np.asarray(a, np.float32), requires_grad=False)


def _fold_bound(y, ref):
    """The documented bound of BatchNorm folding (float32)."""
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4 * np.abs(ref).max() + 1e-5)


def _pair(build, x):
    """Plans of two identical graphs: optimised and not; returns (plan, plan0, y, y0)."""
    p1 = compile(build())
    p0 = compile(build(), fuse=False)
    verify(p1)
    return p1, p0, p1.run([x])[0], p0.run([x])[0]


def _act(y, act):
    if act == "relu":
        return ops.relu(y)
    if act == "relu6":  # ONNX Clip(0, 6) as the importer builds it
        return ops.minimum(ops.maximum(y, _const(0)), _const(6))
    if act == "hardswish":  # ONNX HardSwish as the importer builds it
        return ops.mul(y, ops.hardsigmoid(y, 1 / 6, 0.5))
    if act == "silu":  # SiLU as ONNX exports it: Sigmoid then Mul
        return ops.mul(ops.sigmoid(y), y)
    if act == "sigmoid":  # the gate of a squeeze-and-excitation block
        return ops.sigmoid(y)
    if act == "hardsigmoid":  # MobileNetV3's gate
        return ops.hardsigmoid(y, 1 / 6, 0.5)
    return y


def _conv_chain(act, residual, bias, seed=0, depthwise=False):
    # depthwise: 4 -> 4 channels, groups 4, on planes large enough (17x17) for the NCHW
    # plane-by-plane kernel (depthwise.py), whose threads run the epilogue on their parts
    o, side = (4, 17) if depthwise else (6, 7)

    def build():
        rng = np.random.default_rng(seed)
        x = Placeholder((2, 4, side, side), name="x")
        w = _const(rng.standard_normal((o, 1 if depthwise else 4, 3, 3)) * 0.4)
        b = _const(rng.standard_normal(o)) if bias else None
        y = ops.conv2d(x, w, b, 1, 1, groups=4 if depthwise else 1)
        if residual:  # a 1x1 shortcut computed after the main convolution
            y = ops.add(y, ops.conv2d(x, _const(rng.standard_normal((o, 4, 1, 1))), None))
        return Graph([ops.mul(_act(y, act), _const(1.5))], inputs=[x])
    return build


@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("act", ["", "relu", "relu6", "hardswish", "silu", "sigmoid",
                                 "hardsigmoid"])
@pytest.mark.parametrize("residual", [False, True])
def test_fused_conv_epilogue_is_bit_for_bit(act, residual, depthwise):
    if not act and not residual:
        pytest.skip("nothing to fuse")
    side = 17 if depthwise else 7
    x = np.random.default_rng(1).standard_normal((2, 4, side, side)).astype(np.float32) * 4
    x[0, 0, :2] = 0.0  # exact zeros (and -0.0 after a zero conv row) reach the epilogue
    p1, p0, y, y0 = _pair(_conv_chain(act, residual, bias=True, depthwise=depthwise), x)
    np.testing.assert_array_equal(y, y0)
    label = "+".join(["Conv2d"] + (["Add"] if residual else []) +
                     ([{"relu": "ReLU", "relu6": "ReLU6", "hardswish": "HardSwish",
                        "silu": "SiLU", "sigmoid": "Sigmoid",
                        "hardsigmoid": "HardSigmoid"}[act]] if act else []))
    assert label in [n.op.label for n in p1.nodes]
    removed = {"": 0, "relu": 1, "relu6": 2, "hardswish": 2, "silu": 2, "sigmoid": 1,
               "hardsigmoid": 1}[act] + residual
    assert len(p0.nodes) - len(p1.nodes) == removed


def test_epilogue_keeps_nan_and_signed_zero():
    def build():
        x = Placeholder((1, 2, 3, 3), name="x")
        w = _const(np.eye(2).reshape(2, 2, 1, 1))  # y = x: the epilogue sees the input
        return Graph([_act(ops.conv2d(x, w, None), "relu6")], inputs=[x])
    x = np.array([np.nan, -0.0, 0.0, -1, 3, 7, np.inf, -np.inf, 6] * 2,
                 np.float32).reshape(1, 2, 3, 3)
    _, _, y, y0 = _pair(build, x)
    np.testing.assert_array_equal(y.view(np.uint32), y0.view(np.uint32))


def test_shared_intermediate_is_not_fused():
    def build():
        x = Placeholder((1, 2, 4, 4), name="x")
        y = ops.conv2d(x, _const(np.ones((3, 2, 1, 1))), None)
        return Graph([ops.relu(y), ops.add(y, _const(1.0))], inputs=[x])
    p1 = compile(build())
    assert [n.op.label for n in p1.nodes if n.type == "Conv2d"] == ["Conv2d"]


def test_noops_are_dropped_bit_for_bit():
    def build():
        x = Placeholder((2, 3, 4), name="x")
        y = ops.identity(ops.mul(x, _const(2.0)))
        y = ops.reshape(y, (2, 3, 4))
        y = ops.cast(y, np.float32)
        y = ops.transpose(y, (0, 1, 2))
        y = ops.concat([y], 1)
        y = ops.identity(ops.add(y, _const(1.0)))
        return Graph([ops.transpose(y, (1, 0, 2)), ops.identity(y)], inputs=[x])
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    p1 = compile(build())
    p0 = compile(build(), fuse=False)
    types = [n.type for n in p1.nodes]
    assert types.count("Identity") == 1  # the one that is an output
    assert types.count("Transpose") == 1 and "Reshape" not in types and "Cast" not in types
    assert "Concat" not in types
    assert len(p0.nodes) == 10
    for a, b in zip(p1.run([x]), p0.run([x])):
        np.testing.assert_array_equal(a, b)


def _conv_bn(bias):
    def build():
        rng = np.random.default_rng(3)
        x = Placeholder((2, 5, 8, 8), name="x")
        w = _const(rng.standard_normal((7, 5, 3, 3)) * 0.3)
        b = _const(rng.standard_normal(7)) if bias else None
        y = ops.conv2d(x, w, b, 1, 1)
        bn = [_const(rng.uniform(0.5, 2, 7)), _const(rng.standard_normal(7)),
              _const(rng.standard_normal(7)), _const(rng.uniform(0.2, 3, 7))]
        y = ops.batchnorm_2d(y, *bn, momentum=0.9, eps=1e-5, training=False)
        return Graph([ops.relu(y)], inputs=[x])
    return build


@pytest.mark.parametrize("bias", [False, True])
def test_batchnorm_folds_into_conv_within_bound(bias):
    x = np.random.default_rng(4).standard_normal((2, 5, 8, 8)).astype(np.float32)
    g = _conv_bn(bias)()
    params = {id(t): t.data.copy() for t in g.leaves() if t.data is not None}
    p1 = compile(g)
    p0 = compile(_conv_bn(bias)(), fuse=False)
    assert [n.op.label for n in p1.nodes] == ["Conv2d+BatchNorm+ReLU"]
    assert "BatchNorm2d" in [n.type for n in p0.nodes]
    _fold_bound(p1.run([x])[0], p0.run([x])[0])
    for t in g.leaves():  # the model's parameters are left as they were
        if id(t) in params:
            np.testing.assert_array_equal(t.data, params[id(t)])
    r = p1.memory_report()
    assert r["folded_bytes"] == 4 * (7 * 5 * 9 + 7)
    assert r["owned_persistent_bytes"] >= r["folded_bytes"]


def test_training_graph_keeps_batchnorm():
    sg_random.seed(0)
    m = zoo.ResNet(widths=(4, 8))
    m.set_optimizer(opt.SGD(lr=0.1))
    x = np.zeros((2, 3, 8, 8), np.float32)
    m.compile([x], is_train=True)
    plan = m.plan_for(x, np.zeros(2, np.int32))
    assert "BatchNorm2d" in [n.type for n in plan.nodes] and not plan.folds


def _spread_bn_stats(m, rng):
    m.set_states({k: rng.uniform(0.3, 2.0, v.shape).astype(np.float32) if k.endswith("var")
                  else rng.standard_normal(v.shape).astype(np.float32) * 0.3
                  for k, v in m.get_states().items()
                  if k.endswith("running_mean") or k.endswith("running_var")})


def _eager_eval(m, x):
    m.graph(False)
    try:
        return m(x).data.copy()
    finally:
        m.graph(True)


def test_resnet_eval_folds_and_refolds_after_training():
    sg_random.seed(0)
    rng = np.random.default_rng(5)
    m = zoo.ResNet(widths=(8, 16))
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    labels = rng.integers(0, 10, 2).astype(np.int32)
    m.compile([x], is_train=False)
    _spread_bn_stats(m, rng)
    states = {k: v.data.copy() for k, v in m.get_states().items()}
    plan = m.plan_for(x)
    labels_of = [n.op.label for n in plan.nodes]
    assert "BatchNorm2d" not in [n.type for n in plan.nodes]
    assert len(plan.folds) == 6
    # the convs after the stem run direct and channels-last (passes/layout.py)
    assert "Conv2dDirectNHWC+BatchNorm+Add+ReLU" in labels_of, labels_of
    assert "Conv2d+BatchNorm+ReLU" in labels_of, labels_of
    y0 = m(x).data.copy()
    _fold_bound(y0, _eager_eval(m, x))
    for k, v in m.get_states().items():  # folding left every parameter and buffer alone
        np.testing.assert_array_equal(v.data, states[k])
    m.train()
    for _ in range(2):
        m(x, labels)
    m.eval()
    y1 = m(x).data.copy()  # the cached eval plan, its folded weights recomputed
    assert m.plan_for(x) is plan
    _fold_bound(y1, _eager_eval(m, x))
    assert np.abs(y1 - y0).max() > 1e-3
    m.set_states({k: v for k, v in states.items()})  # back to the first parameters
    _fold_bound(m(x).data, y0)


def test_profile_and_pictures_name_fused_nodes():
    from singa_graph.viz.extract import extract

    sg_random.seed(0)
    m = zoo.ResNet(widths=(4, 8))
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    m.compile([x], is_train=False)
    prof = m.profile(x, repeat=1)
    assert "Conv2d+BatchNorm+Add+ReLU" in prof.table(top=100)
    assert "Conv2d+BatchNorm+Add+ReLU" in [t for t, _, _ in prof.by_type]
    view = extract(m.plan_for(x))
    assert "Conv2d+BatchNorm+Add+ReLU" in [n.op for n in view.nodes]


def test_profile_counts_tiled_convs_as_the_convs_they_replace(monkeypatch):
    """GFLOP/s in profiles: the register-tile forms (blocked or channels-last weights)
    count the multiply-adds of the Conv2d they replaced."""
    from singa_graph.runtime.plan import flops

    x = np.random.default_rng(6).standard_normal((4, 3, 32, 32)).astype(np.float32)

    def plan():
        sg_random.seed(0)
        m = zoo.ResNet(widths=(16, 32, 64))
        m.compile([x], is_train=False)
        return m.plan_for(x)

    tiled = plan()
    with monkeypatch.context() as mp:
        mp.setattr(comp, "optimize_for_inference", lambda g, device="cpu", weight_copies=True: {})
        plain = plan()
    types = {n.type for n in tiled.nodes}
    assert "Conv2dDirectNHWC" in types, types
    counted = sorted(flops(n) for n in tiled.nodes if flops(n))
    assert counted == sorted(flops(n) for n in plain.nodes if flops(n))
    assert len(counted) == sum(t.startswith("Conv2d") for t in (n.type for n in plain.nodes)) + 1


def test_bench_resnet_eval_plan_loses_batchnorms_adds_and_relus(monkeypatch):
    """The ResNet of bench/step_time.py in eval mode (batch 4 here): every BatchNorm folds,
    every residual Add and ReLU joins a convolution; outputs within the folding bound."""
    x = np.random.default_rng(6).standard_normal((4, 3, 32, 32)).astype(np.float32)

    def plan_and_output():
        sg_random.seed(0)
        m = zoo.ResNet(widths=(16, 32, 64))
        m.compile([x], is_train=False)
        _spread_bn_stats(m, np.random.default_rng(7))
        return m.plan_for(x), m(x).data.copy()

    plan, y = plan_and_output()
    with monkeypatch.context() as mp:
        mp.setattr(comp, "optimize_for_inference", lambda g, device="cpu", weight_copies=True: {})
        plan0, y0 = plan_and_output()
    types0 = [n.type for n in plan0.nodes]
    assert len(plan.folds) == types0.count("BatchNorm2d") == 9
    # removed: 9 BatchNorms, 3 Adds and the 3 ReLUs after them (the unoptimised plan fused
    # the other ReLUs into their BatchNorms, and each Add+ReLU into one elementwise node):
    # 25 -> 13 nodes, the convolutions and the head; then the channels-last chain adds one
    # Transpose after the stem and makes the global pool a Mean and a Reshape (a view)
    removed = sum(types0.count(t) for t in ("BatchNorm2d", "FusedElementwise"))
    assert len(plan0.nodes) - len(plan.nodes) + 2 == removed == 12
    assert not {"BatchNorm2d", "Add", "ReLU", "FusedElementwise"} & {n.type for n in plan.nodes}
    _fold_bound(y, y0)


def _depthwise_chain(act, residual, size, stride):
    def build():
        rng = np.random.default_rng(3)
        x = Placeholder((2, 20, size, size), name="x")
        w = _const(rng.standard_normal((20, 1, 3, 3)) * 0.4)
        y = ops.conv2d(x, w, _const(rng.standard_normal(20)), stride, 1, 1, 20)
        if residual:
            y = ops.add(y, ops.conv2d(x, _const(rng.standard_normal((20, 20, 1, 1)) * 0.2),
                                      None, stride))
        return Graph([ops.mul(_act(y, act), _const(1.5))], inputs=[x])
    return build


@pytest.mark.parametrize("act", ["relu", "relu6", "hardswish", "silu", "sigmoid",
                                 "hardsigmoid"])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("size,stride", [(4, 1), (7, 2), (9, 1)])
def test_fused_depthwise_epilogue_is_bit_for_bit(act, residual, size, stride, monkeypatch):
    # 4x4 and 7x7 at stride 2 run the channels-innermost forward, 9x9 the plane-by-plane one;
    # the residual's strided 1x1 conv stays on im2col (a dense conv in a channels-last chain
    # would sum on the register tiles, in another order than the unfused plan)
    from singa_graph.passes import layout_kinds

    monkeypatch.setattr(layout_kinds, "_dense", lambda *args: False)
    x = np.random.default_rng(1).standard_normal((2, 20, size, size)).astype(np.float32)
    p1, p0, y, y0 = _pair(_depthwise_chain(act, residual, size, stride), x)
    np.testing.assert_array_equal(y, y0)
    assert len(p1.nodes) < len(p0.nodes)


@pytest.mark.parametrize("act", ["relu", "relu6", "hardswish", "silu", "sigmoid",
                                 "hardsigmoid"])
def test_fused_pointwise_epilogue_is_bit_for_bit(act, monkeypatch):
    # 256 channels at 2x2: runtime/kernels/cpu/pointwise.py's dot products (not the direct
    # kernel, which sums in another order than the unfused plan's)
    from singa_graph.passes import direct

    monkeypatch.setattr(direct, "direct_convs", lambda g, weight_copies=True: 0)

    def build():
        rng = np.random.default_rng(2)
        x = Placeholder((2, 256, 2, 2), name="x")
        w = _const(rng.standard_normal((64, 256, 1, 1)) * 0.1)
        y = ops.conv2d(x, w, _const(rng.standard_normal(64)), 1, 0)
        y = ops.add(y, ops.conv2d(x, _const(rng.standard_normal((64, 256, 1, 1)) * 0.1)))
        return Graph([ops.mul(_act(y, act), _const(1.5))], inputs=[x])
    x = np.random.default_rng(1).standard_normal((2, 256, 2, 2)).astype(np.float32)
    fused, plain = compile(build()), compile(build(), fuse=False)
    np.testing.assert_array_equal(fused.run([x])[0], plain.run([x])[0])
    assert len(fused.nodes) < len(plain.nodes)


def test_epilogue_does_not_take_a_fast_math_callers_flags():
    # A Numba function without its own fast-math setting inherits the flags of the first
    # caller that compiles it, and that version then serves every caller: the epilogue
    # (and the formulas it calls) pin theirs, so a kernel compiled with ``contract`` that
    # calls it first still gets HardSwish's separate multiply and add, as the op rounds it
    from numba import njit

    from singa_graph.ops import formulas
    from singa_graph.runtime.kernels.cpu import epilogue

    @njit(fastmath={"contract", "reassoc"})
    def fast_caller(y, a, b, k):  # a fresh signature (Fortran order): compiled here first
        epilogue.conv_epilogue(y, y[0, :0], False, y, False, epilogue.HARDSWISH, a, b, k)

    x = np.linspace(-3.5, 3.5, 4001).astype(np.float32)
    a, b = np.float32(1 / 6), np.float32(0.5)
    y = np.asfortranarray(np.stack([x, x]))  # a layout no other caller compiles
    fast_caller(y, a, b, formulas.constants(np.dtype(np.float32)))
    want = x * np.clip(x * a + b, 0, 1).astype(np.float32)
    np.testing.assert_array_equal(y[0], want)
