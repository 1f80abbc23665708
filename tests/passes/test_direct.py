"""Direct convolutions of CPU inference plans (passes/direct.py, runtime/kernels/cpu/
conv_direct.py, simd.py): the register-tiled kernel against a float64 reference over
strides, asymmetric padding, dilation, epilogues, batch sizes, tile and channel tails;
results independent of the thread count; the pass converts what it should, stays within
float32 rounding of the unoptimised graph, and its blocked weights follow the
parameters."""
from __future__ import annotations

import numpy as np
import pytest

from singa_graph import ops
from singa_graph.ir import Graph, Placeholder
from singa_graph.ir.tensor import Tensor
from singa_graph.ops.conv_tiles import Conv2dDirect
from singa_graph.passes import compile, verify
from singa_graph.passes.direct import BLOCKED, ColumnBlocks, Spread, wins
from singa_graph.passes.held_weights import Permuted
from singa_graph.runtime import threads
from singa_graph.runtime.registry import bind, workspace_bytes
from helpers import blocked_weight, conv_reference, run_step

#: output channels (columns) a block of blocked weights holds on this machine: 16 float32
#: with AVX-512, 8 with AVX2
B = Conv2dDirect.block(np.float32)


def _run(x, w, b, stride, pads, dil, res, act, nthreads, groups=1):
    op = Conv2dDirect.of(ops.Conv2d(stride, pads, dil, groups, act=act,
                                    residual=res is not None), w.shape[0])
    ins = [x, blocked_weight(w, groups)] + ([b] if b is not None else []) + \
        ([res] if res is not None else [])
    return run_step(op, ins, nthreads)


CASES = [  # n, c, h, w, o, k, stride, pads, dilation, groups, bias, residual, act
    (2, 128, 8, 8, 32, 3, 1, (1, 1, 1, 1), 1, 1, True, False, ""),      # densenet's
    (2, 64, 3, 3, 256, 3, 1, (1, 1, 1, 1), 1, 1, True, False, "relu"),  # squeezenet's
    (3, 16, 7, 5, 48, 3, 1, (1, 1, 1, 1), 1, 1, False, True, "relu"),   # odd batch, plane
    (1, 24, 9, 9, 64, 5, 2, (2, 1, 0, 2), 1, 1, True, False, ""),       # asymmetric pads
    (2, 8, 10, 10, 16, 3, 1, (2, 2, 2, 2), 2, 1, True, True, "relu"),   # dilation
    (2, 3, 20, 20, 32, 7, 2, (3, 3, 3, 3), 1, 1, True, False, "relu"),  # a stem
    (4, 32, 2, 2, 96, 3, 1, (1, 1, 1, 1), 1, 1, False, False, ""),      # 2x2 planes
    (2, 40, 4, 4, 1040, 3, 1, (1, 1, 1, 1), 1, 1, True, False, ""),     # many blocks
    (1, 16, 1, 1, 16, 1, 1, (0, 0, 0, 0), 1, 1, False, False, ""),      # one pixel
    (2, 64, 3, 3, 1000, 1, 1, (0, 0, 0, 0), 1, 1, True, False, "relu"), # 1x1, last block
    (3, 20, 5, 6, 40, 3, 1, (1, 0, 1, 2), 1, 1, True, True, ""),        # 8 of 16 filled
    (2, 440, 2, 2, 440, 3, 1, (1, 1, 1, 1), 1, 55, True, False, "relu"),# RegNet's
    (2, 104, 8, 8, 104, 3, 2, (1, 1, 1, 1), 1, 13, False, True, ""),    # stride 2
    (1, 64, 5, 5, 96, 3, 1, (1, 1, 1, 1), 1, 4, True, False, ""),       # 24 outputs a group
    (3, 72, 7, 6, 48, 3, 1, (1, 0, 2, 1), 1, 3, True, True, "relu"),    # a block a group
    (2, 32, 6, 6, 64, 1, 1, (0, 0, 0, 0), 1, 16, False, False, ""),     # 1x1, 2 inputs
    (2, 12, 4, 4, 20, 3, 1, (1, 1, 1, 1), 1, 2, True, False, ""),       # span past C
]


@pytest.mark.parametrize("case", CASES)
def test_kernel_matches_a_float64_reference_on_any_thread_count(case):
    n, c, h, wd, o, k, s, pads, dil, g, has_b, has_res, act = case
    dtype = np.float32  # the tiles' only dtype (ops._util.tiled)
    rng = np.random.default_rng(sum(case[:6]))
    x = rng.standard_normal((n, c, h, wd)).astype(dtype)
    w = (rng.standard_normal((o, c // g, k, k)) / np.sqrt(c // g * k * k)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype) if has_b else None
    ref = conv_reference(x, w, b, s, pads, dil, None, "", g)
    res = rng.standard_normal(ref.shape).astype(dtype) if has_res else None
    ref = conv_reference(x, w, b, s, pads, dil, res, act, g)
    y1 = _run(x, w, b, s, pads, dil, res, act, 1, g)
    y2 = _run(x, w, b, s, pads, dil, res, act, 2, g)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(y1, ref, rtol=0, atol=8 * eps * np.sqrt(c * k * k)
                               * (np.abs(ref).max() + 1))
    np.testing.assert_array_equal(y1, y2)  # one fused multiply-add chain per output


def test_group_span_covers_every_lane_of_a_block():
    span, start = Conv2dDirect.group_span, Conv2dDirect.group_start
    assert span(440, 440, 55, 16) == 16 and span(96, 64, 4, 16) == 32
    assert span(48, 72, 3, 16) == 24 and span(64, 64, 1, 16) == 64
    for o, c, g in [(440, 440, 55), (96, 64, 4), (48, 72, 3), (20, 12, 2), (64, 32, 16)]:
        og, cg = o // g, c // g
        sp = span(o, c, g, 16)
        for o0 in range(0, o, 16):
            c0 = start(o0, og, cg, c, sp)
            for lane in range(o0, min(o, o0 + 16)):  # its group's inputs inside the span
                assert c0 <= (lane // og) * cg and (lane // og + 1) * cg <= c0 + sp <= c


def test_the_pass_chooses_small_plane_convs_with_larger_kernels():
    conv = ops.Conv2d(1, (1, 1, 1, 1))
    f32 = np.float32
    assert wins(conv, (2, 128, 8, 8), (32, 128, 3, 3), (2, 32, 8, 8), f32)
    assert wins(conv, (2, 128, 8, 8), (40, 128, 3, 3), (2, 40, 8, 8), f32)
    assert not wins(conv, (2, 3, 8, 8), (32, 3, 3, 3), (2, 32, 8, 8), f32)  # 27 terms
    # Winograd's shapes too: in a plan it would transform its weights on every call
    assert wins(conv, (2, 64, 16, 16), (64, 64, 3, 3), (2, 64, 16, 16), f32)
    assert wins(conv, (2, 128, 16, 16), (32, 128, 3, 3), (2, 32, 16, 16), f32)
    assert wins(conv, (2, 32, 32, 32), (32, 32, 3, 3), (2, 32, 32, 32), f32)
    assert not wins(conv, (2, 32, 80, 80), (32, 32, 3, 3), (2, 32, 80, 80), f32)  # plane
    point = ops.Conv2d(1, 0)
    assert wins(point, (2, 512, 3, 3), (1000, 512, 1, 1), (2, 1000, 3, 3), f32)
    assert not wins(point, (2, 256, 16, 16), (128, 256, 1, 1), (2, 128, 16, 16), f32)
    assert not wins(point, (2, 64, 8, 8), (128, 64, 1, 1), (2, 128, 8, 8), f32)  # channels
    assert not wins(point, (2, 128, 8, 8), (16, 128, 1, 1), (2, 16, 8, 8), f32)  # outputs
    grouped = ops.Conv2d(1, (1, 1, 1, 1), groups=2)
    assert wins(grouped, (2, 128, 8, 8), (32, 64, 3, 3), (2, 32, 8, 8), f32)
    assert not wins(grouped, (2, 128, 16, 16), (32, 64, 3, 3), (2, 32, 16, 16), f32)
    depthwise = ops.Conv2d(1, (1, 1, 1, 1), groups=128)  # kernels of its own
    assert not wins(depthwise, (2, 128, 8, 8), (128, 1, 3, 3), (2, 128, 8, 8), f32)


def _t(a):
    return Tensor(data=np.asarray(a), requires_grad=False)


def _small_cnn(seed=0, dtype=np.float32):
    def build():
        rng = np.random.default_rng(seed)

        def c(*shape):
            return _t((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
                      .astype(dtype))

        x = Placeholder((2, 3, 16, 16), dtype=dtype, name="x")
        y = ops.relu(ops.conv2d(x, c(32, 3, 3, 3), c(32), 2, 1))      # stem: stays
        z = ops.relu(ops.conv2d(y, c(32, 32, 3, 3), c(32), 1, 1))     # direct
        z = ops.conv2d(z, c(32, 32, 3, 3), None, 1, 1)                # direct, + residual
        y = ops.relu(ops.add(z, y))
        y = ops.relu(ops.conv2d(y, c(64, 32, 3, 3), c(64), 2, 1))     # direct, stride 2
        y = ops.conv2d(y, c(16, 64, 1, 1), c(16))                     # 1x1: stays
        return Graph([ops.flatten(ops.global_average_pool(y))], inputs=[x])
    return build


@pytest.fixture
def nchw(monkeypatch):
    """No dense convs in channels-last chains (passes/layout.py, tests/passes/
    test_layout_dense.py): the NCHW pass's own tests."""
    from singa_graph.passes import layout_kinds
    monkeypatch.setattr(layout_kinds, "_dense", lambda *args: False)


def test_converted_plan_matches_the_unoptimised_graph_and_follows_the_weights(nchw):
    build = _small_cnn()
    plan, plan0 = compile(build()), compile(build(), fuse=False)
    verify(plan)
    labels = [n.op.label for n in plan.nodes if n.type.startswith("Conv2d")]
    assert labels == ["Conv2d+ReLU", "Conv2dDirect+ReLU", "Conv2dDirect+Add+ReLU",
                      "Conv2dDirect+ReLU", "Conv2d"], labels
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(np.float32)
    y, y0 = plan.run([x])[0], plan0.run([x])[0]
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())
    perms = [f for f in plan.folds if isinstance(f, Permuted)]
    assert len(perms) == 3 and all(f.block == B for f in perms)
    assert plan.memory_report()["folded_bytes"] >= sum(f.nbytes for f in perms)
    plan.refresh_folded(0)
    for f in perms:  # new weights through the Tensor API: the plan must see them
        f.sources[0].copy_from_numpy(np.asarray(f.sources[0].data) * 0.5)
    plan.refresh_folded(0)
    for f in perms:
        src = np.asarray(f.sources[0].data)
        o = src.shape[0]
        assert f.weight.shape == Conv2dDirect.blocked_shape(src.shape, src.dtype)
        np.testing.assert_array_equal(
            f.weight.data, np.transpose(src.reshape(o // B, B, *src.shape[1:]), BLOCKED))
    assert not np.allclose(plan.run([x])[0], y)


def test_float64_plans_keep_the_plain_kernels():
    # the register tiles are float32's (ops._util.tiled): float64 is run for its accuracy
    from singa_graph.ops.linalg import MatMulDirect

    conv = ops.Conv2d(1, (1, 1, 1, 1))
    assert not wins(conv, (2, 128, 8, 8), (32, 128, 3, 3), (2, 32, 8, 8), np.float64)
    build = _small_cnn(dtype=np.float64)
    plan, plan0 = compile(build()), compile(build(), fuse=False)
    labels = [n.op.label for n in plan.nodes if n.type.startswith("Conv2d")]
    assert labels == ["Conv2d+ReLU", "Conv2d+ReLU", "Conv2d+Add+ReLU", "Conv2d+ReLU",
                      "Conv2d"], labels
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16))
    np.testing.assert_allclose(plan.run([x])[0], plan0.run([x])[0], rtol=1e-12, atol=1e-12)
    x64, w64 = (Tensor.symbolic(s, np.float64)
                for s in [(2, 8, 4, 4), Conv2dDirect.blocked_shape((8, 8, 3, 3), np.float64)])
    with pytest.raises(Exception, match="float32, not float64"):
        Conv2dDirect.of(ops.Conv2d(1, 1), 8).infer(x64, w64)
    with pytest.raises(Exception, match="float32, not float64"):
        MatMulDirect().infer(Tensor.symbolic((2, 8), np.float64),
                             Tensor.symbolic((8, 4), np.float64))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_grouped_convs_run_direct_on_a_spread_copy_of_their_weight(layout, monkeypatch):
    if layout == "nchw":
        from singa_graph.passes import layout_kinds
        monkeypatch.setattr(layout_kinds, "_dense", lambda *args: False)
    direct = "Conv2dDirect" if layout == "nchw" else "Conv2dDirectNHWC"
    def build():
        rng = np.random.default_rng(0)

        def c(*shape):
            return _t((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
                      .astype(np.float32))

        x = Placeholder((2, 48, 8, 8), dtype=np.float32, name="x")
        y = ops.relu(ops.conv2d(x, c(48, 8, 3, 3), c(48), 1, 1, groups=6))  # direct
        y = ops.conv2d(y, c(48, 8, 3, 3), None, 2, 1, groups=6)             # direct
        z = ops.conv2d(x, c(48, 1, 3, 3), None, 1, 1, groups=48)            # depthwise
        return Graph([y, z], inputs=[x])

    plan, plan0 = compile(build()), compile(build(), fuse=False)
    verify(plan)
    labels = [n.op.label for n in plan.nodes if n.type.startswith("Conv2d")]
    assert sorted(labels) == ["Conv2d", direct, direct + "+ReLU"], labels
    spread = [f for f in plan.folds if isinstance(f, Spread)]
    span = Conv2dDirect.group_span(48, 48, 6, B)  # 16 channels (two groups) a block of 8 or 16
    assert len(spread) == 2 and all(f.weight.shape == (48 // B, 3, 3, span, B) for f in spread)
    assert plan.memory_report()["folded_bytes"] >= sum(f.nbytes for f in spread)
    x = np.random.default_rng(3).standard_normal((2, 48, 8, 8)).astype(np.float32)
    (y, z), (y0, z0) = plan.run([x]), plan0.run([x])
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())
    np.testing.assert_array_equal(z, z0)
    # new weights through the Tensor API: the plan must see them. The last conv has no
    # bias, so its weight negated negates every product and sum, exactly
    src = next(f for f in spread if f.sources[0].shape == (48, 8, 3, 3)
               and any(len(n.inputs) > 1 and n.inputs[1] is f.weight
                       and n.op.stride == (2, 2) for n in plan.nodes)
               ).sources[0]
    src.copy_from_numpy(np.asarray(src.data) * -1)
    plan.refresh_folded(0)
    np.testing.assert_array_equal(plan.run([x])[0], -y)


# ---------------------------------------------------------------------- products
@pytest.mark.parametrize("m, k, n, has_bias", [(8, 300, 768, True), (2, 64, 40, False),
                                               (13, 17, 8, True), (35, 128, 1000, True),
                                               (2, 33, 58, True), (1, 20, 70, False)])
@pytest.mark.parametrize("blocked", [False, True])
def test_matmul_kernel_matches_a_float64_reference_on_any_thread_count(m, k, n, has_bias,
                                                                       blocked):
    from singa_graph.ops.linalg import MatMulDirect

    dtype = np.float32
    rng = np.random.default_rng(m + k + n)
    x = rng.standard_normal((m, k)).astype(dtype)
    w = rng.standard_normal((k, n)).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    op = MatMulDirect(bias=has_bias, columns=n if blocked else None)
    wk = w
    if blocked:  # (N/B, K, B), the last block filled up with zeros
        blk = MatMulDirect.block(dtype)
        filled = np.concatenate([w, np.zeros((k, -n % blk), dtype)], axis=1)
        wk = np.ascontiguousarray(filled.reshape(k, -1, blk).transpose(1, 0, 2))
    ins = [x.reshape(1, m, k), wk] + ([b] if has_bias else [])
    outs = []
    for nt in (1, 2):
        y = np.full((1, m, n), np.nan, dtype)
        old = threads.get_num_threads()
        threads.set_num_threads(nt)
        try:
            bind(op, ins, [y], ws=np.empty(workspace_bytes(op, ins, [y]), np.uint8))()
        finally:
            threads.set_num_threads(old)
        outs.append(y)
    ref = x.astype(np.float64) @ w + (b if has_bias else 0)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(outs[0][0], ref, rtol=0,
                               atol=8 * eps * np.sqrt(k) * (np.abs(ref).max() + 1))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_the_pass_takes_products_by_constant_weights_and_their_bias():
    def build():
        rng = np.random.default_rng(0)

        def c(*shape):
            return _t((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))

        x = Placeholder((2, 3, 256), dtype=np.float32, name="x")
        h = ops.relu(ops.add(ops.matmul(x, c(256, 264)), c(264)))  # MatMulDirect+Add
        h = ops.add(c(256), ops.matmul(h, c(264, 256)))             # bias first: still fused
        g = ops.matmul(h, c(256, 256))                              # no bias
        g = ops.matmul(g, c(256, 8))                                # too small
        return Graph([ops.matmul(g, ops.transpose(g, (0, 2, 1)))], inputs=[x])  # not const

    plan, plan0 = compile(build()), compile(build(), fuse=False)
    verify(plan)
    labels = [n.op.label for n in plan.nodes if "MatMul" in n.type]
    assert labels == ["MatMulDirect+Add", "MatMulDirect+Add", "MatMulDirect", "MatMul",
                      "MatMul"], labels
    assert not any(n.type == "Add" for n in plan.nodes)
    x = np.random.default_rng(1).standard_normal((2, 3, 256)).astype(np.float32)
    y, y0 = plan.run([x])[0], plan0.run([x])[0]
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_small_weights_go_direct_over_many_rows(vector_bytes, monkeypatch):
    """With AVX-512 a 96 x 384 weight (under MIN_WEIGHT_VALUES) goes direct over 512 rows
    (MANY_ROWS), not over 130; with AVX2 over both."""
    from singa_graph import host

    monkeypatch.setattr(host, "vector_bytes", lambda: vector_bytes)

    def build(rows):
        rng = np.random.default_rng(0)
        x = Placeholder((2, rows // 2, 96), dtype=np.float32, name="x")
        w = _t((rng.standard_normal((96, 384)) / 10).astype(np.float32))
        return Graph([ops.add(ops.matmul(x, w), _t(np.ones(384, np.float32)))], inputs=[x])

    for rows, direct in ((512, True), (130, vector_bytes < 64)):
        plan = compile(build(rows))
        labels = [n.op.label for n in plan.nodes]
        assert labels == (["MatMulDirect+Add"] if direct else ["MatMul", "Add"]), (rows, labels)
        x = np.random.default_rng(1).standard_normal((2, rows // 2, 96)).astype(np.float32)
        y0 = compile(build(rows), fuse=False).run([x])[0]
        np.testing.assert_allclose(plan.run([x])[0], y0, rtol=0, atol=1e-5 * np.abs(y0).max())


def test_a_gemms_small_weight_goes_direct_over_few_rows():
    """An ONNX Gemm's (N, K) weight of GEMM_MIN_WEIGHT_VALUES goes direct over a ViT's 130
    rows, through a blocked copy."""
    def build():
        x = Placeholder((130, 64), dtype=np.float32, name="x")
        w = _t((np.random.default_rng(2).standard_normal((64, 64)) / 8).astype(np.float32))
        return Graph([ops.gemm(x, w, _t(np.ones(64, np.float32)), trans_b=True)], inputs=[x])

    plan = compile(build())
    assert [n.op.label for n in plan.nodes] == ["MatMulDirect+Add"]
    x = np.random.default_rng(3).standard_normal((130, 64)).astype(np.float32)
    y0 = compile(build(), fuse=False).run([x])[0]
    np.testing.assert_allclose(plan.run([x])[0], y0, rtol=0, atol=1e-5 * np.abs(y0).max())


def test_the_pass_takes_gemms_through_a_transposed_copy_of_their_weight():
    # an exported classifier is Gemm(x, W (N, K), C, transB=1)
    def build():
        rng = np.random.default_rng(0)

        def c(*shape):
            return _t((rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32))

        x = Placeholder((2, 512), dtype=np.float32, name="x")
        h = ops.gemm(x, c(300, 512), c(300), trans_b=True)       # MatMulDirect+Add, copy
        h = ops.gemm(h, c(300, 400))                              # MatMulDirect, as it is
        g = ops.gemm(h, c(256, 400), c(256), alpha=0.5, trans_b=True)  # alpha: stays
        g = ops.gemm(g, c(300, 256), c(300), beta=2.0, trans_b=True)   # beta: stays
        return Graph([ops.gemm(g, c(300, 300), c(1, 300))], inputs=[x])  # 2-d C: stays

    plan, plan0 = compile(build()), compile(build(), fuse=False)
    verify(plan)
    labels = [n.op.label for n in plan.nodes if n.type in ("Gemm", "MatMulDirect")]
    assert labels == ["MatMulDirect+Add", "MatMulDirect", "Gemm", "Gemm", "Gemm"], labels
    perms = [f for f in plan.folds if isinstance(f, Permuted)]
    assert len(perms) == 1 and perms[0].weight.shape == (-(-300 // B), 512, B)  # in blocks
    x = np.random.default_rng(1).standard_normal((2, 512)).astype(np.float32)
    y, y0 = plan.run([x])[0], plan0.run([x])[0]
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())
    src = perms[0].sources[0]  # new weights through the Tensor API: the plan must see them
    src.copy_from_numpy(np.asarray(src.data) * 0.5)
    plan.refresh_folded(0)
    nb = -(-300 // B)
    filled = np.concatenate([np.asarray(src.data), np.zeros((nb * B - 300, 512), np.float32)])
    np.testing.assert_array_equal(perms[0].weight.data,
                                  filled.reshape(nb, B, 512).transpose(0, 2, 1))
    assert not np.allclose(plan.run([x])[0], y)


def test_weights_streamed_over_few_rows_are_read_from_column_blocks():
    def build(rows):
        rng = np.random.default_rng(0)
        w = _t((rng.standard_normal((1024, 300)) / 32).astype(np.float32))  # 1.2 MB
        x = Placeholder((2, rows, 1024), dtype=np.float32, name="x")
        return Graph([ops.relu(ops.add(ops.matmul(x, w), _t(np.ones(300, np.float32))))],
                     inputs=[x])

    many = compile(build(64))  # 128 rows: the weight is read in place
    assert not [f for f in many.folds if isinstance(f, ColumnBlocks)]
    plan, plan0 = compile(build(4)), compile(build(4), fuse=False)
    verify(plan)
    made = [f for f in plan.folds if isinstance(f, ColumnBlocks)]
    assert len(made) == 1 and made[0].weight.shape == (-(-300 // B), 1024, B)
    assert [n.op.columns for n in plan.nodes if n.type == "MatMulDirect"] == [300]
    x = np.random.default_rng(1).standard_normal((2, 4, 1024)).astype(np.float32)
    y, y0 = plan.run([x])[0], plan0.run([x])[0]
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-5 * np.abs(y0).max())
    src = made[0].sources[0]  # new weights through the Tensor API: the plan must see them
    src.copy_from_numpy(np.asarray(src.data) * 0.5)
    plan.refresh_folded(0)
    nb = -(-300 // B)
    filled = np.concatenate([np.asarray(src.data).T,
                             np.zeros((nb * B - 300, 1024), np.float32)])
    np.testing.assert_array_equal(made[0].weight.data,
                                  filled.reshape(nb, B, 1024).transpose(0, 2, 1))
    assert not np.allclose(plan.run([x])[0], y)


@pytest.mark.parametrize("pads", [(2, 1, 0, 2), (0, 0, 0, 1), (1, 1, 1, 1)])
def test_padding_writes_its_planes_only(pads):
    # the parts' padded planes sit side by side in the workspace: a write past the last
    # plane lands in the next part's scratch (a race that lost one output's sum)
    from singa_graph.runtime.kernels.cpu.conv_direct import pad_planes

    pt, pl, pb, pr = pads
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) + 1
    hp, wp = 4 + pt + pb, 5 + pl + pr
    p = np.full((4, hp * wp), -7.0, np.float32)
    pad_planes(x, 1, p[:3], pt, pl, hp, wp)
    np.testing.assert_array_equal(p[3], -7.0)
    want = np.zeros((3, hp, wp), np.float32)
    want[:, pt:pt + 4, pl:pl + 5] = x[1]
    np.testing.assert_array_equal(p[:3].reshape(3, hp, wp), want)


def test_without_weight_copies_a_plan_holds_each_weight_once(nchw):
    build = _small_cnn()
    plan, plan0 = compile(build(), weight_copies=False), compile(build(), fuse=False)
    verify(plan)
    labels = [n.op.label for n in plan.nodes if n.type.startswith("Conv2d")]
    assert labels == ["Conv2d+ReLU", "Conv2d+ReLU", "Conv2d+Add+ReLU", "Conv2d+ReLU",
                      "Conv2d"], labels  # no weight was free to hold blocked
    assert not plan.folds and plan.memory_report()["folded_bytes"] == 0
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(plan.run([x])[0], y0 := plan0.run([x])[0], rtol=0,
                               atol=1e-5 * np.abs(y0).max())

    def products():
        rng = np.random.default_rng(0)
        x = Placeholder((2, 512), dtype=np.float32, name="x")
        h = ops.gemm(x, _t(rng.standard_normal((300, 512)).astype(np.float32) / 23),
                     _t(np.ones(300, np.float32)), trans_b=True)  # would copy: stays
        return Graph([ops.gemm(h, _t(rng.standard_normal((300, 400)).astype(np.float32)))],
                     inputs=[x])                                   # read in place

    plan = compile(products(), weight_copies=False)
    assert [n.op.label for n in plan.nodes if n.type in ("Gemm", "MatMulDirect")] == \
        ["Gemm", "MatMulDirect"]
    assert not plan.folds


def test_a_model_recompiles_when_weight_copies_changes():
    from singa_graph import layer, model

    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(256)

        def forward(self, x):
            return self.fc(x)

    net = Net()
    x = np.random.default_rng(0).standard_normal((2, 512)).astype(np.float32)
    net.compile([x], is_train=False)
    y = net(x).data
    assert net.weight_copies and net._last_plan is not None
    with pytest.raises(TypeError):
        net.weight_copies = "no"
    assert net.weight_copies
    net.weight_copies = False
    assert not net._plans and net._last_plan is None
    np.testing.assert_allclose(net(x).data, y, rtol=1e-5, atol=1e-5)
    assert net._last_plan.memory_report()["folded_bytes"] == 0
