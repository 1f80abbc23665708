"""The fused LSTM cell against plain numpy, with finite-difference gradients of both
outputs, shape errors and compiled plan == eager."""
import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops
from helpers import check_grad, eager, graph_matches_eager

rng = np.random.default_rng(12)


def _ref(pre, c):
    hid = c.shape[1]
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    i, f, o = (sig(pre[:, k * hid:(k + 1) * hid]) for k in range(3))
    g = np.tanh(pre[:, 3 * hid:])
    cn = f * c + i * g
    return o * np.tanh(cn), cn


def test_lstm_cell():
    pre, c = rng.standard_normal((3, 8)), rng.standard_normal((3, 2))
    h, cn = eager(ops.lstm_cell, pre, c)
    want_h, want_c = _ref(pre, c)
    np.testing.assert_allclose(h, want_h, rtol=1e-12)
    np.testing.assert_allclose(cn, want_c, rtol=1e-12)
    check_grad(ops.lstm_cell, pre, c, output=0)
    check_grad(ops.lstm_cell, pre, c, output=1)
    graph_matches_eager(ops.lstm_cell, pre, c)
    with pytest.raises(sg.ShapeError, match=r"\(N, 4H\)"):
        ops.lstm_cell(sg.Placeholder((3, 6)), sg.Placeholder((3, 2)))
    with pytest.raises(sg.DTypeError):
        ops.lstm_cell(sg.Placeholder((3, 8), dtype="int32"), sg.Placeholder((3, 2)))
