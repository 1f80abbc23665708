"""layer.RNN, layer.LSTM (SINGA's per-timestep API), layer.Gemm, layer.Embedding and the
char-RNN example."""
import importlib.util
import os

import numpy as np
import pytest

import singa_graph as sg
from singa_graph import autograd, layer, ops
from helpers import check_grad, graph_matches_eager

rng = np.random.default_rng(9)
N, IN, HID, T = 2, 3, 2, 3


def _rnn_fn(x0, x1, x2, h0, wx, wh, b):
    r = layer.RNN(IN, HID)
    object.__setattr__(r, "_initialized", True)
    r.Wx, r.Wh, r.b = wx, wh, b
    hs, h = r([x0, x1, x2], h0)
    assert len(hs) == T and h is hs[-1]
    return ops.cat(hs, 0)


def _lstm_fn(x0, x1, x2, h0, c0, *params):
    m = layer.LSTM(IN, HID)
    object.__setattr__(m, "_initialized", True)
    names = [f"{k}_{g}" for k in ("Wx", "Wh", "Bx", "Bh") for g in "ifog"]
    for name, p in zip(names, params):
        setattr(m, name, p)
    hs, h, c = m([x0, x1, x2], (h0, c0))
    return ops.cat(hs + [c], 0)


def test_rnn_gradient_through_three_timesteps():
    args = ([rng.standard_normal((N, IN)) for _ in range(T)] + [rng.standard_normal((N, HID))]
            + [rng.standard_normal((IN, HID)), rng.standard_normal((HID, HID)) * 0.5,
               rng.standard_normal(HID)])
    check_grad(_rnn_fn, *args)
    graph_matches_eager(_rnn_fn, *args)


def test_lstm_gradient_through_three_timesteps():
    args = ([rng.standard_normal((N, IN)) for _ in range(T)]
            + [rng.standard_normal((N, HID)), rng.standard_normal((N, HID))]
            + [rng.standard_normal((IN, HID)) for _ in range(4)]
            + [rng.standard_normal((HID, HID)) for _ in range(4)]
            + [rng.standard_normal(HID) for _ in range(8)])
    check_grad(_lstm_fn, *args)
    graph_matches_eager(_lstm_fn, *args)


def test_lstm_matches_plain_numpy():
    xs = [rng.standard_normal((N, IN)).astype(np.float32) for _ in range(T)]
    m = layer.LSTM(IN, HID)
    h0 = sg.Tensor(data=np.zeros((N, HID), np.float32), requires_grad=False)
    hs, h, c = m([sg.Tensor(data=x, requires_grad=False) for x in xs], (h0, h0))
    p = {k: v.data for k, v in m.get_params().items()}
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    hh, cc = np.zeros((N, HID)), np.zeros((N, HID))
    for x, got in zip(xs, hs):
        gate = {g: x @ p[f"Wx_{g}"] + p[f"Bx_{g}"] + hh @ p[f"Wh_{g}"] + p[f"Bh_{g}"]
                for g in "ifog"}
        cc = sig(gate["f"]) * cc + sig(gate["i"]) * np.tanh(gate["g"])
        hh = sig(gate["o"]) * np.tanh(cc)
        np.testing.assert_allclose(got.data, hh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.data, cc, rtol=1e-5, atol=1e-6)
    assert sorted(m.get_params()) == sorted(f"{k}_{g}" for k in ("Wx", "Wh", "Bx", "Bh")
                                            for g in "ifog")


def test_recurrent_errors():
    x = sg.Placeholder((N, IN))
    with pytest.raises(sg.ShapeError, match=r"timestep 1 has shape \(2, 4\)"):
        layer.RNN(IN, HID)([x, sg.Placeholder((N, 4))], sg.Placeholder((N, HID)))
    with pytest.raises(sg.ShapeError, match="state"):
        layer.LSTM(IN, HID)([x], (sg.Placeholder((N, 3)), sg.Placeholder((N, HID))))
    with pytest.raises(NotImplementedError, match="num_layers"):
        layer.LSTM(IN, HID, num_layers=2)


def test_gemm_layer_and_embedding_layer():
    g = layer.Gemm(4, alpha=0.5, beta=2.0)  # transB: W is (4, in)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    y = g(sg.Tensor(data=x, requires_grad=False))
    assert g.W.shape == (4, 5) and g.b.shape == (1, 4)
    np.testing.assert_allclose(y.data, 0.5 * x @ g.W.data.T + 2.0 * g.b.data, rtol=1e-5)
    with pytest.raises(sg.ShapeError, match="Gemm expects 5"):
        g(sg.Tensor(data=np.ones((3, 6), np.float32)))
    e = layer.Embedding(10, 3)
    ids = np.array([[1, 9], [9, 0]])
    out = e(sg.Tensor(data=ids, requires_grad=False))
    np.testing.assert_array_equal(out.data, e.W.data[ids])
    e.from_pretrained(np.ones((10, 3), np.float32), freeze=True)
    assert "W" not in e.get_params() and "W" in e.get_states()


def test_char_rnn_example_loss_falls_in_graph_mode():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "char_rnn.py")
    spec = importlib.util.spec_from_file_location("char_rnn", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        losses = mod.main(["--epochs", "4", "--steps", "5", "--quiet"])
    finally:
        autograd.training = False  # the model switched it on; later tests expect the default
    assert losses[-1] < 0.8 * losses[0]
