"""Every SINGA 3 autograd function added for SINGA compatibility, called the way SINGA's
docs and tests call it (positional arguments in SINGA's order), on SINGA-made tensors."""
import numpy as np
import pytest

from singa_graph import autograd, tensor

rng = np.random.default_rng(11)


def _t(*shape, lo=-1.0, hi=1.0):
    return tensor.from_numpy(rng.uniform(lo, hi, shape).astype(np.float32))


X, Y = _t(2, 3), _t(2, 3)
IMG = _t(1, 4, 2, 2)
CALLS = {
    "sin": lambda: autograd.sin(X), "cos": lambda: autograd.cos(X),
    "tan": lambda: autograd.tan(X), "asin": lambda: autograd.asin(X),
    "acos": lambda: autograd.acos(X), "atan": lambda: autograd.atan(X),
    "sinh": lambda: autograd.sinh(X), "cosh": lambda: autograd.cosh(X),
    "asinh": lambda: autograd.asinh(X), "acosh": lambda: autograd.acosh(_t(2, 3, lo=1, hi=2)),
    "atanh": lambda: autograd.atanh(X * 0.5), "erf": lambda: autograd.erf(X),
    "ceil": lambda: autograd.ceil(X), "floor": lambda: autograd.floor(X),
    "round": lambda: autograd.round(X), "rounde": lambda: autograd.rounde(X),
    "sign": lambda: autograd.sign(X), "reciprocal": lambda: autograd.reciprocal(X + 2),
    "selu": lambda: autograd.selu(X, 1.67326, 1.0507), "elu": lambda: autograd.elu(X, 1.0),
    "softplus": lambda: autograd.softplus(X), "softsign": lambda: autograd.softsign(X),
    "hardsigmoid": lambda: autograd.hardsigmoid(X, 0.2, 0.5),
    "prelu": lambda: autograd.prelu(X, _t(2, 3)), "gelu": lambda: autograd.gelu(X),
    "greater": lambda: autograd.greater(X, Y), "less": lambda: autograd.less(X, Y),
    "equal": lambda: autograd.equal(X, X), "_and": lambda: autograd._and(X, Y),
    "_or": lambda: autograd._or(X, Y), "_xor": lambda: autograd._xor(X, Y),
    "_not": lambda: autograd._not(X),
    "where": lambda: autograd.where(X, Y, [[1, 0, 1], [0, 1, 0]]),
    "max": lambda: autograd.max(X, Y, X * 2), "min": lambda: autograd.min(X, Y),
    "clip": lambda: autograd.clip(X, -0.5, 0.5),
    "shape": lambda: autograd.shape(X), "squeeze": lambda: autograd.squeeze(_t(2, 1, 3), [1]),
    "unsqueeze": lambda: autograd.unsqueeze(X, [0]),
    "slice": lambda: autograd.slice(X, [0, 1], [2, 3], [0, 1], [1, 1]),
    "tile": lambda: autograd.tile(X, [2, 1]), "expand": lambda: autograd.expand(X, [2, 2, 3]),
    "pad": lambda: autograd.pad(X, "constant", [0, 1, 0, 1], 0.0),
    "upsample": lambda: autograd.upsample(IMG, "nearest", [1.0, 1.0, 2.0, 2.0]),
    "depth_to_space": lambda: autograd.depth_to_space(IMG, 2, "DCR"),
    "space_to_depth": lambda: autograd.space_to_depth(_t(1, 1, 4, 4), 2),
    "gather": lambda: autograd.gather(X, 1, [0, 2]),
    "scatter_elements": lambda: autograd.scatter_elements(X, np.array([[1, 0, 1]]),
                                                          np.ones((1, 3), np.float32), 0),
    "nonzero": lambda: autograd.nonzero(X), "onehot": lambda: autograd.onehot(
        -1, tensor.from_numpy(np.array([0, 2])), 3, [0.0, 1.0]),
    "constant_of_shape": lambda: autograd.constant_of_shape(
        tensor.from_numpy(np.array([2, 2])), 1.0),
    "cossim": lambda: autograd.cossim(X, Y),
    "ranking_loss": lambda: autograd.ranking_loss(_t(4), _t(4), 0.2),
    "embedding": lambda: autograd.embedding(tensor.from_numpy(np.array([[0, 1]])), _t(2, 3)),
    "globalaveragepool": lambda: autograd.globalaveragepool(_t(2, 3, 3, 4), "channels_last"),
    "binary_cross_entropy": lambda: autograd.binary_cross_entropy(
        autograd.sigmoid(X), tensor.from_numpy(np.ones((2, 3), np.float32))),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_singa_call_runs_and_gives_finite_values(name):
    y = CALLS[name]()
    assert isinstance(y, tensor.Tensor)
    assert np.all(np.isfinite(tensor.to_numpy(y)))
