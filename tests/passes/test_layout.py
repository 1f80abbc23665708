"""Channels-last depthwise chains (passes/layout.py): converted plans match the
unoptimised graph within float32 rounding (the pointwise GEMMs block their sums another
way than the NCHW kernels), chains without depthwise convs stay NCHW, and the weights the
plan holds channels-last follow the parameters."""
from __future__ import annotations

import numpy as np
import pytest

from singa_graph import host, ops
from singa_graph.ir import Graph, Placeholder
from singa_graph.ir.tensor import Tensor
from singa_graph.passes import compile, verify
from singa_graph.passes.held_weights import Permuted


def _t(a):
    return Tensor(data=np.asarray(a), requires_grad=False)


# ---------------------------------------------------------------------- the pass
def _mobile_block(seed=0, dtype=np.float32, depthwise=True, size=16):
    """Stem conv, then depthwise / pointwise convs with ReLU6, a strided depthwise conv, a
    residual, a squeeze-and-excitation gate and a global average pool: what the pass
    converts in mobile nets."""
    def relu6(y):
        return ops.minimum(ops.maximum(y, _t(np.zeros((), dtype))), _t(np.full((), 6, dtype)))

    def build():
        rng = np.random.default_rng(seed)

        def c(*shape):
            return _t((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
                      .astype(dtype))

        x = Placeholder((2, 3, size, size), dtype=dtype, name="x")
        y = relu6(ops.conv2d(x, c(16, 3, 3, 3), c(16), 2, 1))         # stem, stays NCHW
        if depthwise:
            y = relu6(ops.conv2d(y, c(16, 1, 3, 3), c(16), 1, 1, groups=16))
        y = ops.conv2d(y, c(24, 16, 1, 1), c(24))
        z = relu6(ops.conv2d(y, c(48, 24, 1, 1), c(48)))
        if depthwise:
            z = relu6(ops.conv2d(z, c(48, 1, 5, 5), c(48), 2, 2, groups=48))
        s = ops.global_average_pool(z)                                 # squeeze-excite
        s = ops.relu(ops.conv2d(s, c(8, 48, 1, 1), c(8)))
        s = ops.hardsigmoid(ops.conv2d(s, c(48, 8, 1, 1), c(48)), 1 / 6, 0.5)
        z = ops.mul(z, s)
        z = ops.conv2d(z, c(24, 48, 1, 1), c(24))
        if not depthwise:
            return Graph([ops.flatten(ops.global_average_pool(ops.add(z, y)))], inputs=[x])
        z = ops.add(z, ops.conv2d(y, c(24, 1, 3, 3), None, 2, 1, groups=24))  # residual
        out = ops.flatten(ops.global_average_pool(relu6(z)))
        return Graph([out, z], inputs=[x])                             # z: an NCHW output
    return build


def test_converted_plan_matches_the_unoptimised_graph():
    dtype = np.float32
    build = _mobile_block(dtype=dtype)
    plan, plan0 = compile(build()), compile(build(), fuse=False)
    verify(plan)
    types = [n.type for n in plan.graph.nodes]
    assert types.count("Conv2dNHWC") == 8 and "Conv2d" in types  # the stem stays
    assert types.count("Transpose") == 2  # into the chain, and out to the NCHW output
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(dtype)
    for y, y0 in zip(plan.run([x]), plan0.run([x])):
        assert y.shape == y0.shape
        np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())


def _weights(seed):
    """``c(*shape)``: a float32 constant Tensor of ``shape``, scaled by its fan-in, drawn
    from one seeded stream (so that two builds of a graph get the same weights)."""
    rng = np.random.default_rng(seed)

    def c(*shape):
        return _t((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
                  .astype(np.float32))
    return c


def test_a_mean_over_the_planes_reads_the_chain_channels_last():
    """MnasNet ends its chain with ``x.mean([2, 3])``: an ``(N, C)`` result that needs no
    transpose out of the chain."""
    def build():
        c = _weights(5)
        x = Placeholder((2, 8, 6, 6), name="x")
        y = ops.relu(ops.conv2d(x, c(8, 1, 3, 3), c(8), 1, 1, groups=8))
        y = ops.relu(ops.conv2d(y, c(32, 8, 1, 1), c(32)))
        return Graph([ops.mean(y, axis=(-2, -1))], inputs=[x])

    plan, plan0 = compile(build()), compile(build(), fuse=False)
    verify(plan)
    nodes = plan.graph.nodes
    assert [n.type for n in nodes].count("Transpose") == 1  # into the chain only
    (mean,) = [n for n in nodes if n.type == "Mean"]
    assert mean.op.axes == (1, 2) and mean.inputs[0].shape == (2, 6, 6, 32)
    x = np.random.default_rng(6).standard_normal((2, 8, 6, 6)).astype(np.float32)
    (y,), (y0,) = plan.run([x]), plan0.run([x])
    assert y.shape == (2, 32)
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())


def test_squeeze_excite_convs_hold_the_layout_their_kernel_is_fastest_on():
    """Over at most layout.FEW_PIXELS pixels a widening pointwise conv holds an
    HWIO copy for the register tiles; a narrowing one keeps its OIHW weight for the dot
    products."""
    from singa_graph.passes.layout import FEW_PIXELS

    plan = compile(_mobile_block()())
    se = {n.outputs[0].shape[3]: n.op.weight_layout for n in plan.graph.nodes
          if n.type == "Conv2dNHWC" and n.inputs[0].shape[1:3] == (1, 1)}
    assert 2 <= FEW_PIXELS and se == {8: "OIHW", 48: "HWIO"}


def test_widening_pointwise_convs_over_few_pixels_hold_a_copy_for_the_tiles():
    """Over up to layout.FEW_PIXELS pixels (batch 2 at 2x2: an ONNX-exported mobile net's
    last stage, its weights not BatchNorm folds) a widening conv holds an HWIO copy, a
    narrowing one reads its OIHW weight as the dot products' operand; both match the
    unoptimised graph."""
    from singa_graph.passes.layout import FEW_PIXELS

    def build():
        c = _weights(7)
        x = Placeholder((2, 16, 2, 2), name="x")
        y = ops.relu(ops.conv2d(x, c(16, 1, 3, 3), c(16), 1, 1, groups=16))
        y = ops.relu(ops.conv2d(y, c(96, 16, 1, 1), c(96)))   # widening
        y = ops.relu(ops.conv2d(y, c(96, 1, 3, 3), c(96), 1, 1, groups=96))
        y = ops.conv2d(y, c(24, 96, 1, 1), c(24))              # narrowing
        return Graph([ops.mean(y, axis=(2, 3))], inputs=[x])

    assert 2 * 2 * 2 <= FEW_PIXELS
    plan, plan0 = compile(build()), compile(build(), fuse=False)
    layouts = {n.outputs[0].shape[3]: n.op.weight_layout for n in plan.graph.nodes
               if n.type == "Conv2dNHWC" and n.op.groups == 1}
    assert layouts == {96: "HWIO", 24: "OIHW"}
    x = np.random.default_rng(8).standard_normal((2, 16, 2, 2)).astype(np.float32)
    (y,), (y0,) = plan.run([x]), plan0.run([x])
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())


def test_float64_chains_stay_nchw():
    # the channels-last kernels are float32's (ops._util.tiled): a float64 plan keeps NCHW
    # and runs the plane loops and GEMMs, to float64's rounding
    build = _mobile_block(dtype=np.float64)
    plan, plan0 = compile(build()), compile(build(), fuse=False)
    types = [n.type for n in plan.graph.nodes]
    assert "Conv2d" in types and not {"Conv2dNHWC", "Conv2dDirect", "Transpose"} & set(types)
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16))
    for y, y0 in zip(plan.run([x]), plan0.run([x])):
        np.testing.assert_allclose(y, y0, rtol=0, atol=1e-12 * np.abs(y0).max())


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_large_plane_depthwise_convs_with_few_channels_stay_nchw(vector_bytes, monkeypatch):
    # at 64x64 the first depthwise conv (16 channels, stride 1) sees 32x32 planes, where
    # the plane-by-plane kernel is faster on AVX-512: the chain starts after it. With AVX2's
    # vectors it joins the chain. (Only the pass's choice follows the patched width; the
    # kernels keep the machine's, and are correct either way.)
    monkeypatch.setattr(host, "vector_bytes", lambda: vector_bytes)
    build = _mobile_block(size=64)
    plan, plan0 = compile(build()), compile(build(), fuse=False)
    types = [n.type for n in plan.graph.nodes]
    planes = vector_bytes == 64
    assert types.count("Conv2dNHWC") == 8 - planes, types
    assert types.count("Conv2d") == 1 + planes, types
    x = np.random.default_rng(5).standard_normal((2, 3, 64, 64)).astype(np.float32)
    for y, y0 in zip(plan.run([x]), plan0.run([x])):
        np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_narrow_pointwise_convs_on_large_planes_stay_nchw(vector_bytes, monkeypatch):
    # MnasNet's first pointwise convs, 16 -> 8 and 8 -> 24 channels over 2 x 32 x 32
    # pixels: on AVX-512 they stay NCHW and the chain starts behind them, at the strided
    # depthwise conv; the 24 -> 32 one after it (8 x 8 planes) joins the chain either way
    monkeypatch.setattr(host, "vector_bytes", lambda: vector_bytes)

    def build():
        rng = np.random.default_rng(6)

        def c(*shape):
            return _t((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
                      .astype(np.float32))

        x = Placeholder((2, 16, 32, 32), dtype=np.float32, name="x")
        y = ops.conv2d(x, c(8, 16, 1, 1), c(8))
        y = ops.relu(ops.conv2d(y, c(24, 8, 1, 1), c(24)))
        y = ops.relu(ops.conv2d(y, c(24, 1, 3, 3), c(24), 2, 1, groups=24))
        y = ops.conv2d(ops.conv2d(y, c(32, 24, 1, 1), c(32)), c(32, 1, 3, 3), c(32), 2, 1,
                       groups=32)
        return Graph([ops.flatten(ops.global_average_pool(y))], inputs=[x])

    plan, plan0 = compile(build()), compile(build(), fuse=False)
    types = [n.type for n in plan.graph.nodes]
    narrow = vector_bytes == 64
    assert types.count("Conv2d") == 2 * narrow, types
    assert types.count("Conv2dNHWC") == 5 - 2 * narrow, types
    # the chain's one transpose: in front of the 8 -> 24 conv, or of the 16 -> 8 one
    (t,) = [n for n in plan.graph.nodes if n.type == "Transpose"]
    assert t.inputs[0].shape[1] == (24 if narrow else 16)
    x = np.random.default_rng(7).standard_normal((2, 16, 32, 32)).astype(np.float32)
    (y,), (y0,) = plan.run([x]), plan0.run([x])
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())


def _convnext_stage(seed=7):
    """Two ConvNeXt blocks and a downsampling conv: each block a depthwise 7x7 conv, a
    permute to channels-last, LayerNorm and an MLP on the channels, a permute back, a
    ``(C, 1, 1)`` layer scale and the residual add (torchvision's CNBlock)."""
    def build():
        c = _weights(seed)
        x = Placeholder((2, 16, 6, 6), name="x")

        def block(y, ch):
            z = ops.conv2d(y, c(ch, 1, 7, 7), c(ch), 1, 3, groups=ch)
            z = ops.transpose(z, (0, 2, 3, 1))
            z = ops.layer_norm(z, _t(np.ones(ch, np.float32)), c(ch))
            z = ops.gelu(ops.add(ops.matmul(z, c(ch, 4 * ch)), c(4 * ch)))
            z = ops.add(ops.matmul(z, c(4 * ch, ch)), c(ch))
            z = ops.transpose(z, (0, 3, 1, 2))
            return ops.add(ops.mul(c(ch, 1, 1), z), y)

        y = block(block(x, 16), 16)
        y = ops.conv2d(y, c(32, 16, 2, 2), c(32), 2, 0)  # downsampling, a dense conv
        y = block(y, 32)
        return Graph([ops.flatten(ops.global_average_pool(y))], inputs=[x])
    return build


def test_a_chain_takes_the_place_of_the_graphs_own_permutes():
    """ConvNeXt permutes to channels-last after each depthwise conv and back before the
    residual add: in a chain the permutes go (the chain's tensors are channels-last
    already), the depthwise convs and the layer scale run channels-last, and only the
    input's Transpose into the chain is left."""
    build = _convnext_stage()
    plan, plan0 = compile(build()), compile(build(), fuse=False)
    verify(plan)
    types = [n.type for n in plan.graph.nodes]
    assert types.count("Transpose") == 1 and types.count("Conv2dNHWC") == 3
    assert "Conv2d" not in types
    x = np.random.default_rng(8).standard_normal((2, 16, 6, 6)).astype(np.float32)
    (y,), (y0,) = plan.run([x]), plan0.run([x])
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())


def test_a_permute_whose_output_is_also_read_in_nchw_stays():
    # the chain reads the permute's input; the permute stays for its other reader
    def build():
        c = _weights(9)
        x = Placeholder((2, 8, 5, 5), name="x")
        z = ops.transpose(ops.conv2d(x, c(8, 1, 3, 3), c(8), 1, 1, groups=8), (0, 2, 3, 1))
        z = ops.transpose(ops.add(ops.matmul(z, c(8, 8)), c(8)), (0, 3, 1, 2))
        y = ops.conv2d(ops.relu(z), c(8, 1, 3, 3), c(8), 1, 1, groups=8)
        return Graph([ops.flatten(ops.global_average_pool(y)), z], inputs=[x])

    plan, plan0 = compile(build()), compile(build(), fuse=False)
    verify(plan)
    perms = [n.op.perm for n in plan.graph.nodes if n.type == "Transpose"]
    assert sorted(map(tuple, perms)) == [(0, 2, 3, 1), (0, 3, 1, 2)]  # into the chain; z
    (relu,) = [n for n in plan.graph.nodes if n.type == "ReLU"]
    assert relu.inputs[0].shape == (2, 5, 5, 8)  # reads the permute's input
    x = np.random.default_rng(10).standard_normal((2, 8, 5, 5)).astype(np.float32)
    for y, y0 in zip(plan.run([x]), plan0.run([x])):
        np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())


def test_chains_without_depthwise_convs_stay_nchw():
    plan = compile(_mobile_block(depthwise=False)())
    assert not any(n.type == "Conv2dNHWC" for n in plan.graph.nodes)


def test_permuted_weights_follow_the_parameters():
    build = _mobile_block()
    g = build()
    plan = compile(g)
    perms = [f for f in plan.folds if isinstance(f, Permuted)]
    assert perms and plan.memory_report()["folded_bytes"] >= sum(f.nbytes for f in perms)
    x = np.random.default_rng(4).standard_normal((2, 3, 16, 16)).astype(np.float32)
    plan.refresh_folded(0)  # version 0 seen: from now on only a write refreshes
    before = plan.run([x])[0]
    plan.refresh_folded(0)
    np.testing.assert_array_equal(plan.run([x])[0], before)
    for f in perms:  # new weights through the Tensor API: the plan must see them
        src = f.sources[0]
        src.copy_from_numpy(np.asarray(src.data) * 0.5)
    plan.refresh_folded(0)  # same version: the write counters tell
    after = plan.run([x])[0]
    assert not np.allclose(before, after)
    for f in perms:
        np.testing.assert_array_equal(f.weight.data, np.transpose(f.sources[0].data, f.perm))


class _Separable:
    """A model with BatchNorms after its depthwise and pointwise convs (folded, then held
    HWIO by the pass) for the train -> eval round trip."""

    @staticmethod
    def make():
        from singa_graph import layer, model

        class Net(model.Model):
            def __init__(self):
                super().__init__()
                self.stem = layer.Conv2d(8, 3, stride=2, padding=1)
                self.dw = layer.Conv2d(8, 3, padding=1, group=8, bias=False)
                self.bn1 = layer.BatchNorm2d()
                self.pw = layer.Conv2d(16, 1, bias=False)
                self.bn2 = layer.BatchNorm2d()
                self.dw2 = layer.Conv2d(16, 3, padding=1, group=16)
                self.relu = layer.ReLU()
                self.pool = layer.AvgPool2d(4, 4)
                self.flatten = layer.Flatten()
                self.fc = layer.Linear(5)

            def forward(self, x):
                y = self.relu(self.stem(x))
                y = self.relu(self.bn1(self.dw(y)))
                y = self.relu(self.bn2(self.pw(y)))
                y = self.relu(self.dw2(y))  # two depthwise convs pay for two transposes
                return self.fc(self.flatten(self.pool(y)))

            def train_one_batch(self, x, y):
                from singa_graph import autograd

                out = self.forward(x)
                loss = autograd.softmax_cross_entropy(out, y)
                self.optimizer(loss)
                return out, loss
        return Net()


def test_eval_plan_refolds_its_channels_last_weights_after_training():
    from singa_graph import opt
    from singa_graph import random as sg_random

    sg_random.seed(0)
    rng = np.random.default_rng(8)
    m = _Separable.make()
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 5, 2).astype(np.int32)
    m.compile([x], is_train=False)
    m.set_states({k: rng.uniform(0.3, 2.0, v.shape).astype(np.float32) if k.endswith("var")
                  else rng.standard_normal(v.shape).astype(np.float32) * 0.3
                  for k, v in m.get_states().items() if "running" in k})
    plan = m.plan_for(x)
    labels_of = [n.op.label for n in plan.nodes]
    assert labels_of.count("Conv2dNHWC+BatchNorm+ReLU") == 2, labels_of
    # the BatchNorm folds hold their weights HWIO; only the unfolded dw2 needs a copy
    assert [type(f).__name__ for f in plan.folds] == ["Fold", "Fold", "Permuted"]
    assert all(f.perm == (2, 3, 1, 0) for f in plan.folds)

    def eager():
        m.graph(False)
        try:
            return m(x).data.copy()
        finally:
            m.graph(True)

    y0 = m(x).data.copy()
    np.testing.assert_allclose(y0, eager(), rtol=0, atol=1e-4 * np.abs(y0).max() + 1e-5)
    m.train()
    for _ in range(2):
        m(x, labels)
    m.eval()
    y1 = m(x).data.copy()
    assert m.plan_for(x) is plan and np.abs(y1 - y0).max() > 1e-3
    np.testing.assert_allclose(y1, eager(), rtol=0, atol=1e-4 * np.abs(y1).max() + 1e-5)
