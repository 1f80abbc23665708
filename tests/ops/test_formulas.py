"""Each elementwise formula is written once (ops/formulas.py); kernels are generated from it."""
from __future__ import annotations

import ast
import inspect
import pathlib

import numpy as np
import pytest

import singa_graph  # noqa: F401  (registers every op)
from singa_graph.ir.op import OPS
from singa_graph.ops import formulas as F
from singa_graph.ops import nonlinear as nl

ROOT = pathlib.Path(singa_graph.__file__).parent
ELEMENTWISE_MODULES = ("activation", "elementwise", "math", "nonlinear", "logic")


def _instances(cls):
    if cls is nl.ActivationGrad:
        return [nl.ActivationGrad(op) for op in (nl.Selu(), nl.Elu(), nl.HardSigmoid(),
                                                 nl.Softplus(), nl.Softsign(), nl.Gelu(),
                                                 nl.Gelu("tanh"))]
    if cls is nl.Gelu:
        return [nl.Gelu(), nl.Gelu("tanh")]
    try:
        return [cls()]
    except TypeError:
        return []


def test_every_elementwise_op_maps_to_a_formula():
    """Every op of the elementwise families that keeps its shape per element (not Softmax,
    casts, broadcasts, sums) names a formula that exists."""
    not_formulas = {"Softmax", "SoftmaxGrad", "LogSoftmax", "LogSoftmaxGrad", "SumTo",
                    "BroadcastTo", "Cast"}
    seen = set()
    for t, cls in OPS.items():
        if cls.__module__.rsplit(".", 1)[1] not in ELEMENTWISE_MODULES or t in not_formulas:
            continue
        insts = _instances(cls)
        assert insts, t
        for op in insts:
            name = F.formula_of(op)
            assert name in F.FORMULAS, (t, name)
            seen.add(name)
    for name in ("relu", "relu6", "hardswish", "silu", "sigmoid"):  # conv epilogues use them
        assert name in F.FORMULAS


def test_kernels_hold_no_formula_of_their_own():
    """The CUDA elementwise module has no per-op code switch, and no CPU or CUDA kernel
    module calls a scalar math function an elementwise formula uses outside generated code."""
    cuda_src = (ROOT / "runtime/kernels/cuda/elementwise.py").read_text()
    assert "code ==" not in cuda_src and "math." not in cuda_src
    cpu_src = (ROOT / "runtime/kernels/cpu/elementwise.py").read_text()
    for ufunc in ("np.exp", "np.tanh", "np.maximum", "np.add", "np.multiply", "np.sin"):
        assert ufunc not in cpu_src
    assert not (ROOT / "runtime/kernels/cpu/math.py").exists()
    act = (ROOT / "runtime/kernels/cpu/activation.py").read_text()
    assert "ReLUGrad" not in act and '"Sigmoid"' not in act


def test_formulas_are_plain_functions_of_scalars():
    """Only math, comparisons and arithmetic, and no float literal (float32 stays float32)."""
    for name, fn in F.FORMULAS.items():
        tree = ast.parse(inspect.getsource(fn))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant):
                assert not isinstance(node.value, float), (name, node.value)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id in F.FORMULAS or node.func.id in ("abs", "min", "max"), \
                    (name, node.func.id)
            if isinstance(node, ast.Attribute):
                assert isinstance(node.value, ast.Name) and node.value.id == "math", name


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rounding_formulas_match_numpy_bitwise(dtype):
    big = float(2 ** np.finfo(dtype).nmant)
    x = np.array([-2.5, -1.5, -0.5, -0.4, -0.0, 0.0, 0.3, 0.5, 1.5, 2.5, 0.49, 1.51, -0.7,
                  big, -big, big * 3 + 0.0, np.inf, -np.inf, np.nan, 1e30, -1e30], dtype)
    k = F.constants(dtype)
    for fn, ref in ((F.rint, np.rint), (F.floor, np.floor), (F.ceil, np.ceil)):
        got = np.array([fn(v, 0, 0, k) for v in x], dtype)
        np.testing.assert_array_equal(got, ref(x))
        assert np.array_equal(np.signbit(got), np.signbit(ref(x))), fn.__name__
