"""Elementwise kernels. Each one is a numpy ufunc writing into ``out``: numpy's loops are
compiled and vectorised already, and broadcasting comes for free."""
import numpy as np

from ...registry import kernel


def _binary(ufunc):
    def factory(op, ins, outs):
        a, b = ins
        (y,) = outs
        return lambda: ufunc(a, b, out=y)
    return factory


def _unary(ufunc):
    def factory(op, ins, outs):
        (x,), (y,) = ins, outs
        return lambda: ufunc(x, out=y)
    return factory


for _name, _uf in {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
                   "Div": np.true_divide, "Pow": np.power}.items():
    kernel(_name)(_binary(_uf))

for _name, _uf in {"Neg": np.negative, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
                   "Abs": np.absolute, "Sign": np.sign}.items():
    kernel(_name)(_unary(_uf))


@kernel("SumTo")
def sum_to(op, ins, outs):
    (x,), (y,) = ins, outs
    lead = x.ndim - y.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(y.shape)
                                      if s == 1 and x.shape[lead + i] != 1)
    kept = y.reshape(tuple(1 if i in axes else s for i, s in enumerate(x.shape)))
    if not axes:
        return lambda: np.copyto(y, x.reshape(y.shape))
    return lambda: np.sum(x, axis=axes, keepdims=True, out=kept)


@kernel("BroadcastTo")
def broadcast_to(op, ins, outs):
    (x,), (y,) = ins, outs
    return lambda: np.copyto(y, x)


@kernel("Cast")
def cast(op, ins, outs):
    (x,), (y,) = ins, outs
    return lambda: np.copyto(y, x, casting="unsafe")
