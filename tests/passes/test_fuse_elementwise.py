"""Elementwise-chain fusion (passes/fuse.py): each chain becomes one node and one generated
kernel whose results equal the unfused graph's bit for bit (training steps: test_fuse.py)."""
from __future__ import annotations

import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops
from singa_graph.ir import Graph
from singa_graph.passes import compile, verify
from singa_graph.passes.fuse import fuse_elementwise
from singa_graph.tensor import from_numpy


def c(v):
    return from_numpy(np.array(v, np.float32))


def _hardswish(x):
    return ops.mul(x, ops.hardsigmoid(x, 1 / 6, 0.5))


def _silu(x):
    return ops.mul(x, ops.sigmoid(x))


def _gelu_onnx(x):  # as torch.onnx exports nn.GELU(): Div, Erf, Add, Mul, Mul
    e = ops.erf(ops.div(x, c(1.4142135381698608)))
    return ops.mul(ops.mul(x, ops.add(e, c(1.0))), c(0.5))


def _relu6(x):  # Clip(0, 6) as imported
    return ops.minimum(ops.maximum(x, c(0.0)), c(6.0))


def _layernorm_tail(x):
    rng = np.random.default_rng(3)
    mean = from_numpy(rng.standard_normal((6, 1)).astype(np.float32))
    std = from_numpy(rng.uniform(0.5, 2, (6, 1)).astype(np.float32))
    gamma = from_numpy(rng.standard_normal(5).astype(np.float32))
    beta = from_numpy(rng.standard_normal(5).astype(np.float32))
    return ops.add(ops.mul(ops.div(ops.sub(x, mean), std), gamma), beta)


def _bias_gelu(x):  # a Linear's bias Add, then GELU: the Add's output is read twice
    return _gelu_onnx(ops.add(x, c(np.linspace(-1, 1, 5))))


CHAINS = {"HardSigmoid+Mul": _hardswish, "Sigmoid+Mul": _silu,
          "Add+Div+Erf+Add+Mul+Mul": _bias_gelu,
          "Div+Erf+Add+Mul+Mul": _gelu_onnx, "Max+Min": _relu6,
          "Sub+Div+Mul+Add": _layernorm_tail}


def _plans(build, shape):
    x = sg.Placeholder(shape, name="x")
    fused = compile(Graph([build(x)], inputs=[x]))
    x2 = sg.Placeholder(shape, name="x")
    plain = compile(Graph([build(x2)], inputs=[x2]), fuse=False)
    return fused, plain


@pytest.mark.parametrize("label", list(CHAINS))
def test_chain_is_one_node_and_bitwise_equal_to_unfused(label):
    fused, plain = _plans(CHAINS[label], (6, 5))
    kinds = [n.label for n in fused.nodes]
    assert kinds == [label], kinds
    assert len(plain.nodes) == label.count("+") + 1
    verify(fused)
    x = (np.random.default_rng(0).standard_normal((6, 5)) * 4).astype(np.float32)
    a, b = fused.run({"x": x})[0], plain.run({"x": x})[0]
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32
    # one output buffer: the fused plan holds no intermediate in its arena
    assert fused.memory.arena_bytes <= plain.memory.arena_bytes


def test_big_chain_runs_in_parallel_and_matches():
    fused, plain = _plans(_silu, (300, 1000))  # above PARALLEL_WORK
    x = np.random.default_rng(1).standard_normal((300, 1000)).astype(np.float32)
    np.testing.assert_array_equal(fused.run({"x": x})[0], plain.run({"x": x})[0])


def test_intermediate_fetched_or_read_outside_the_chain_is_not_fused():
    x = sg.Placeholder((4, 3), name="x")
    s = ops.sigmoid(x)
    g = Graph([ops.mul(x, s), s], inputs=[x])  # s is an output
    assert fuse_elementwise(g) == 0
    x = sg.Placeholder((4, 3), name="x")
    s = ops.sigmoid(x)
    g = Graph([ops.add(ops.mul(x, s), ops.sqrt(s))], inputs=[x])  # s has two readers
    assert fuse_elementwise(g) == 3  # both in the chain of the Add: s joins it too
    assert [n.label for n in g.nodes] == ["Sigmoid+Mul+Sqrt+Add"]
    x = sg.Placeholder((4, 3), name="x")
    s = ops.sigmoid(x)
    g = Graph([ops.mul(x, s), ops.sqrt(s)], inputs=[x])  # readers in two chains
    assert fuse_elementwise(g) == 0


def test_ops_run_by_a_numpy_ufunc_on_cpu_do_not_fuse():
    x = sg.Placeholder((4, 3), name="x")
    g = Graph([ops.mul(ops.exp(x), x)], inputs=[x])
    assert fuse_elementwise(g) == 0


def test_profile_shows_the_fused_name():
    fused, _ = _plans(_silu, (6, 5))
    prof = fused.profile({"x": np.ones((6, 5), np.float32)}, repeat=2)
    assert "Sigmoid+Mul" in str(prof)
