"""Kernel cases: elementwise arithmetic, comparisons, unary math, activations, gradients,
casts and broadcasts (runtime/kernels/cuda/elementwise.py)."""
import numpy as np

from singa_graph import ops
from singa_graph.ir.tensor import TensorSpec
from singa_graph.ops import activation as act
from singa_graph.ops import elementwise as ew
from singa_graph.ops import logic, math as m, nonlinear as nl
from singa_graph.ops.fused import FusedElementwise

from harness import Case, rand

X = rand(3, 4, 5)
POS = rand(3, 4, 5, low=0.1, high=2.0, seed=1)
UNIT = rand(3, 4, 5, low=-0.9, high=0.9, seed=2)

CASES = [
    Case(ew.Add(), [X, rand(3, 4, 5, seed=3)], name="Add same shape"),
    Case(ew.Add(), [X, rand(4, 1, seed=3)], name="Add broadcast"),
    Case(ew.Add(), [rand(1, 5, seed=4), X], name="Add broadcast first operand"),
    Case(ew.Sub(), [X, np.float32(0.5) * np.ones((1,), np.float32)], name="Sub scalar"),
    Case(ew.Sub(), [np.ones((1,), np.float32), X], name="Sub scalar first"),
    Case(ew.Mul(), [X, rand(3, 1, 5, seed=5)]),
    Case(ew.Div(), [X, POS]),
    Case(ew.Pow(), [POS, rand(5, seed=6, low=-2, high=2)], rtol=1e-5),
    Case(ew.Add(), [np.arange(12, dtype=np.int32).reshape(3, 4),
                    np.arange(4, dtype=np.int32)], name="Add int32"),
    Case(ew.Add(), [X.astype(np.float64), POS.astype(np.float64)], name="Add float64"),
    Case(ew.Neg(), [X]), Case(ew.Exp(), [X]), Case(ew.Log(), [POS]), Case(ew.Sqrt(), [POS]),
    Case(ew.Abs(), [X]), Case(ew.Sign(), [np.array([-2.0, 0.0, 3.0], np.float32)]),
    Case(ew.Cast(np.int32), [X * 10], name="Cast to int32"),
    Case(ew.Cast(np.float32), [np.arange(6, dtype=np.int64)], name="Cast to float32"),
    Case(ew.BroadcastTo((3, 4, 5)), [rand(4, 1, seed=7)]),
    Case(ew.BroadcastTo((3, 4, 5)), [X], name="BroadcastTo same shape"),
    Case(logic.Greater(), [X, rand(5, seed=8)]), Case(logic.Less(), [X, rand(5, seed=8)]),
    Case(logic.Equal(), [np.array([1, 2, 3], np.float32), np.array([1, 0, 3], np.float32)]),
    Case(logic.And(), [np.array([0, 1, 1, 0], np.float32), np.array([0, 0, 1, 1], np.float32)]),
    Case(logic.Or(), [np.array([0, 1, 1, 0], np.float32), np.array([0, 0, 1, 1], np.float32)]),
    Case(logic.Xor(), [np.array([0, 1, 1, 0], np.float32), np.array([0, 0, 1, 1], np.float32)]),
    Case(logic.Not(), [np.array([0, 1, 2, 0], np.float32)]),
    Case(logic.Where(), [(X > 0).astype(np.float32), X, rand(5, seed=9)]),
    Case(logic.Max(), [X, rand(4, 5, seed=10), rand(5, seed=11)]),
    Case(logic.Min(), [rand(4, 5, seed=10), X]),
    Case(nl.PRelu(), [X, rand(4, 1, seed=12)]),
    Case(nl.PRelu(), [rand(1, 4, 1, seed=12), rand(3, 1, 5, seed=13)],
         name="PRelu x broadcast against slope"),
    Case(ew.ElementwiseMean(), [X, rand(4, 5, seed=10)], name="ElementwiseMean of two"),
    Case(ew.ElementwiseMean(), [X, rand(4, 5, seed=10), rand(5, seed=11)],
         name="ElementwiseMean of three, broadcast"),
    Case(m.Round(), [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, 1.51], np.float32)]),
    Case(m.RoundHalfAway(), [np.array([-2.5, -1.5, -0.4, 0.5, 1.5, 2.5], np.float32)]),
    Case(m.Ceil(), [X * 3]), Case(m.Floor(), [X * 3]),
    Case(m.Reciprocal(), [POS]),
]
for _cls, _x in [(m.Sin, X), (m.Cos, X), (m.Tan, X), (m.Asin, UNIT), (m.Acos, UNIT),
                 (m.Atan, X), (m.Sinh, X), (m.Cosh, X), (m.Asinh, X), (m.Acosh, POS + 1),
                 (m.Atanh, UNIT), (m.Erf, X)]:
    CASES.append(Case(_cls(), [_x], rtol=1e-5, atol=1e-6))
ACTS = [nl.Selu(), nl.Elu(0.7), nl.HardSigmoid(0.3, 0.4), nl.Softplus(), nl.Softsign(),
        nl.Gelu(), nl.Gelu("tanh"), act.ReLU(), act.Sigmoid(), act.Tanh(),
        act.LeakyReLU(0.1)]
for _op in ACTS:
    CASES.append(Case(_op, [X * 3], name=f"{_op.type} {getattr(_op, 'approximate', '')}"))
for _op in ACTS[:7]:
    CASES.append(Case(nl.ActivationGrad(_op), [rand(3, 4, 5, seed=13), X * 3],
                      name=f"ActivationGrad of {_op.type} {getattr(_op, 'approximate', '')}"))
# float64 data: the kernels' constants (launch arguments) then carry float64 precision
X64 = X.astype(np.float64) * 3
CASES += [
    Case(nl.Gelu(), [X64], rtol=1e-12, atol=1e-14, name="Gelu float64"),
    Case(act.Sigmoid(), [X64], rtol=1e-12, atol=1e-14, name="Sigmoid float64"),
    Case(nl.ActivationGrad(nl.Gelu("tanh")), [rand(3, 4, 5, seed=13).astype(np.float64), X64],
         rtol=1e-12, atol=1e-14, name="ActivationGrad of Gelu tanh float64"),
    Case(act.ReLUGrad(), [rand(3, 4, 5, seed=14), X]),
    Case(act.LeakyReLUGrad(0.2), [rand(3, 4, 5, seed=14), X]),
    Case(act.SigmoidGrad(), [rand(3, 4, 5, seed=14), (X + 1) / 2]),
    Case(act.TanhGrad(), [rand(3, 4, 5, seed=14), X]),
]
del ops
# fused chains (passes/fuse.py): one generated kernel, flat and broadcasting paths
_F32 = np.dtype(np.float32)
CASES += [
    Case(FusedElementwise((("sigmoid", (0,)), ("mul", (0, -1))), ((0.0, 0.0),) * 2,
                          "Sigmoid+Mul", TensorSpec((3, 4, 5), _F32)), [X * 3],
         name="FusedElementwise Sigmoid+Mul"),
    Case(FusedElementwise((("sub", (0, 1)), ("div", (-1, 2)), ("mul", (-2, 3)),
                           ("add", (-3, 4))), ((0.0, 0.0),) * 4, "Sub+Div+Mul+Add",
                          TensorSpec((3, 4, 5), _F32)),
         [X, rand(3, 4, 1, seed=15), rand(3, 4, 1, low=0.5, high=2.0, seed=16),
          rand(5, seed=17), rand(5, seed=18)], name="FusedElementwise LayerNorm tail"),
    Case(FusedElementwise((("hardsigmoid", (0,)), ("mul", (0, -1)), ("minimum", (-2, 1))),
                          ((1 / 6, 0.5), (0.0, 0.0), (0.0, 0.0)), "HardSigmoid+Mul+Min",
                          TensorSpec((3, 4, 5), _F32)),
         [X * 4, np.full((1,), 2.0, np.float32)], name="FusedElementwise scalar operand"),
]
