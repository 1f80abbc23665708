"""Dense convs, max pools and concats in channels-last chains (passes/layout.py,
runtime/kernels/cpu/conv_direct_last.py, max_pool.py): the NHWC tiles and max pool give
the NCHW kernels' values bit for bit (the same sums in the same order) on any thread
count; a squeezenet-like graph converts into one chain, matches the unoptimised graph
within float32 rounding and keeps its blocked weights in step with the parameters."""
from __future__ import annotations

import numpy as np
import pytest

from singa_graph import host, ops
from singa_graph.ir import Graph, Placeholder
from singa_graph.ir.tensor import Tensor
from singa_graph.ops.conv_tiles import Conv2dDirect, Conv2dDirectNHWC
from singa_graph.ops.pool import MaxPool2dNHWC
from singa_graph.passes import compile, verify
from singa_graph.passes.held_weights import Permuted
from helpers import blocked_weight, run_step

NHWC, NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _t(a):
    return Tensor(data=np.asarray(a), requires_grad=False)


def _last(a):
    return np.ascontiguousarray(a.transpose(NHWC))


CASES = [  # n, c, h, w, o, k, stride, pads, dilation, groups, bias, residual, act
    (2, 16, 15, 15, 64, 3, 1, (1, 1, 1, 1), 1, 1, True, False, "relu"),  # squeezenet's
    (2, 64, 3, 3, 256, 3, 1, (1, 1, 1, 1), 1, 1, True, False, "relu"),   # its last fire
    (3, 24, 9, 7, 40, 3, 2, (1, 0, 2, 1), 1, 1, False, True, "relu6"),   # uneven, tails
    (1, 64, 8, 8, 128, 1, 2, (0, 0, 0, 0), 1, 1, True, True, ""),        # 1x1 stride 2
    (2, 8, 10, 10, 16, 3, 1, (2, 2, 2, 2), 2, 1, True, False, "relu"),   # dilation
    (2, 64, 5, 5, 96, 3, 1, (1, 1, 1, 1), 1, 4, True, False, ""),        # grouped
    (1, 32, 16, 16, 32, 5, 1, (0, 0, 0, 0), 1, 1, False, False, "silu"), # no padding
    (2, 3, 20, 18, 64, 7, 2, (3, 3, 3, 3), 1, 1, True, False, "relu"),   # a 7x7 stem
]


@pytest.mark.parametrize("case", CASES)
def test_nhwc_tiles_are_the_nchw_tiles_bit_for_bit(case):
    n, c, h, wd, o, k, s, pads, dil, g, has_b, has_res, act = case
    rng = np.random.default_rng(sum(case[:6]))
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (rng.standard_normal((o, c // g, k, k)) / np.sqrt(c // g * k * k)).astype(np.float32)
    conv = ops.Conv2d(s, pads, dil, g, act=act, residual=has_res)
    y_shape = conv.output_shape(x.shape, w.shape)
    extra = ([rng.standard_normal(o).astype(np.float32)] if has_b else []) + \
        ([rng.standard_normal(y_shape).astype(np.float32)] if has_res else [])
    want = run_step(Conv2dDirect.of(conv, o), [x, blocked_weight(w, g), *extra])
    extra_last = extra[:1] + [_last(r) for r in extra[1:]] if has_b else \
        [_last(r) for r in extra]
    op = Conv2dDirectNHWC.of(conv, o)
    for nt in (1, 2):
        got = run_step(op, [_last(x), blocked_weight(w, g), *extra_last], nt)
        np.testing.assert_array_equal(got.transpose(NCHW), want)


@pytest.mark.parametrize("case", [  # n, c, h, w, kernel, stride, pads, ceil_mode
    (2, 64, 31, 31, 3, 2, (0, 0, 0, 0), True),   # squeezenet's, ceil mode
    (2, 70, 8, 7, 3, 1, (1, 1, 1, 1), True),     # googlenet's branch pools
    (1, 24, 9, 10, 2, 2, (0, 1, 1, 0), False),
    (3, 5, 4, 4, 3, 2, (1, 1, 1, 1), False)])
def test_nhwc_max_pool_is_the_nchw_one_bit_for_bit(case):
    n, c, h, w, k, s, pads, ceil = case
    rng = np.random.default_rng(c * h)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    x[rng.random(x.shape) < 0.1] = -0.0
    op = ops.MaxPool2d(k, s, pads, ceil_mode=ceil)
    want = run_step(op, [x])
    nhwc = MaxPool2dNHWC(k, s, pads, ceil_mode=ceil)
    for nt in (1, 2):
        got = run_step(nhwc, [_last(x)], nt).transpose(NCHW)
        np.testing.assert_array_equal(got, want)
        assert (np.signbit(got) == np.signbit(want)).all()


def test_nhwc_ops_refuse_what_they_cannot_run():
    with pytest.raises(Exception, match="float32, not float64"):
        Conv2dDirectNHWC.of(ops.Conv2d(1, 1), 8).infer(
            Tensor.symbolic((2, 4, 4, 8), np.float64),
            Tensor.symbolic(Conv2dDirect.blocked_shape((8, 8, 3, 3), np.float64), np.float64))
    with pytest.raises(Exception, match="does not fit"):  # NHWC: C is the last axis
        Conv2dDirectNHWC.of(ops.Conv2d(1, 1), 8).infer(
            Tensor.symbolic((2, 8, 4, 4), np.float32),
            Tensor.symbolic(Conv2dDirect.blocked_shape((8, 8, 3, 3), np.float32), np.float32))
    with pytest.raises(Exception, match="no gradient"):
        MaxPool2dNHWC(2).gradient([], [], [], [True])


# ---------------------------------------------------------------------- the pass
def _fire_net(seed=0, size=32, stem=32):
    """squeezenet1_1's pattern: a stem conv (stays NCHW on the plane tiles for ``stem``
    <= 32 output channels; with more, having 27 terms, it joins the chain on processors
    with 32 vector registers and stays on the im2col GEMM elsewhere), ceil-mode max pools,
    fire modules (a 1x1 squeeze, 1x1 and 3x3 expands joined by a Concat), a global pool."""
    def build():
        rng = np.random.default_rng(seed)

        def c(*shape):
            return _t((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
                      .astype(np.float32))

        def fire(y, cin, sq, ex):
            s = ops.relu(ops.conv2d(y, c(sq, cin, 1, 1), c(sq)))
            return ops.concat([ops.relu(ops.conv2d(s, c(ex, sq, 1, 1), c(ex))),
                               ops.relu(ops.conv2d(s, c(ex, sq, 3, 3), c(ex), 1, 1))], 1)

        x = Placeholder((2, 3, size, size), dtype=np.float32, name="x")
        y = ops.relu(ops.conv2d(x, c(stem, 3, 3, 3), c(stem), 2))        # stem
        y = ops.max_pool2d(y, 3, 2, ceil_mode=True)
        y = fire(fire(y, stem, 16, 32), 64, 16, 32)
        y = ops.max_pool2d(y, 3, 2, ceil_mode=True)
        y = fire(y, 64, 24, 48)
        y = ops.relu(ops.conv2d(y, c(10, 96, 1, 1), c(10)))
        return Graph([ops.flatten(ops.global_average_pool(y))], inputs=[x])
    return build


@pytest.mark.parametrize("stem,registers", [(32, 32), (64, 32), (64, 16)])
def test_fire_modules_run_as_one_channels_last_chain(stem, registers, monkeypatch):
    monkeypatch.setattr(host, "vector_registers", lambda: registers)
    build = _fire_net(stem=stem)
    plan, plan0 = compile(build()), compile(build(), fuse=False)
    verify(plan)
    types = [n.type for n in plan.graph.nodes]
    if stem == 64 and registers == 32:
        # the stem joins the chain: its one Transpose moves the 3-channel image, and the
        # max pool after the stem runs channels-last
        assert types[:3] == ["Transpose", "Conv2dDirectNHWC", "MaxPool2dNHWC"], types
        assert types.count("Conv2dDirectNHWC") == 4 and types.count("Conv2d") == 0, types
        assert types.count("MaxPool2dNHWC") == 2, types
    else:
        # the stem and the max pool after it stay NCHW: the chain's one Transpose moves
        # the pool's smaller output
        assert types[:3] == ["Conv2d", "MaxPool2d", "Transpose"], types
        assert types.count("Conv2dDirectNHWC") == 3 and types.count("Conv2d") == 1, types
        assert types.count("MaxPool2dNHWC") == 1, types
    assert types.count("Transpose") == 1, types
    assert all(n.op.axis == 3 for n in plan.graph.nodes if n.type == "Concat")
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    y, y0 = plan.run([x])[0], plan0.run([x])[0]
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())
    blocked = [f for f in plan.folds if isinstance(f, Permuted) and f.block]
    assert len(blocked) == types.count("Conv2dDirectNHWC")
    plan.refresh_folded(0)
    for f in blocked:  # new weights through the Tensor API: the plan must see them
        f.sources[0].copy_from_numpy(np.asarray(f.sources[0].data) * 0.5)
    plan.refresh_folded(0)
    assert not np.allclose(plan.run([x])[0], y)


def test_a_7x7_stem_starts_the_chain():
    """ResNet's and GoogLeNet's 7x7 stems run on the channels-last tiles (the chain then
    transposes the 3-channel image, not the pool's 64 channels, and the pool after the
    stem runs channels-last too); results are the NCHW plan's bit for bit."""
    def build():
        rng = np.random.default_rng(4)
        w1 = _t((rng.standard_normal((64, 3, 7, 7)) / 12).astype(np.float32))
        w2 = _t((rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32))
        x = Placeholder((2, 3, 32, 32), dtype=np.float32, name="x")
        y = ops.max_pool2d(ops.relu(ops.conv2d(x, w1, None, 2, 3)), 3, 2, 1)
        return Graph([ops.relu(ops.conv2d(y, w2, None, 1, 1))], inputs=[x])

    plan = compile(build())
    verify(plan)
    types = [n.type for n in plan.graph.nodes]
    assert types == ["Transpose", "Conv2dDirectNHWC", "MaxPool2dNHWC", "Conv2dDirectNHWC",
                     "Transpose"], types
    x = np.random.default_rng(5).standard_normal((2, 3, 32, 32)).astype(np.float32)
    from singa_graph.passes import layout
    with pytest.MonkeyPatch.context() as mp:  # the same plan without the chain
        mp.setattr(layout, "channels_last", lambda graph, *a, **k: 0)
        plan_nchw = compile(build())
    assert "Conv2dDirectNHWC" not in [n.type for n in plan_nchw.graph.nodes]
    np.testing.assert_array_equal(plan.run([x])[0], plan_nchw.run([x])[0])


def test_without_weight_copies_dense_convs_stay_nchw():
    plan = compile(_fire_net()(), weight_copies=False)
    assert not any(n.type == "Conv2dDirectNHWC" for n in plan.graph.nodes)
