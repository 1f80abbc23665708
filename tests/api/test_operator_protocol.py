"""SINGA's operator protocol: code that drives the backward by hand through
``y.creator.backward(dy)`` gets what ``autograd.backward`` computes."""
import numpy as np
import pytest

import singa_graph as sg
from singa_graph import autograd, tensor

rng = np.random.default_rng(8)


def test_backward_by_hand_matches_autograd():
    autograd.training = True
    try:
        x = tensor.from_numpy(rng.standard_normal((4, 3)).astype(np.float32))
        t = tensor.from_numpy(rng.standard_normal((4, 2)).astype(np.float32))
        w = tensor.Tensor((3, 2), requires_grad=True, stores_grad=True).gaussian(0, 1)
        b = tensor.Tensor((2,), requires_grad=True, stores_grad=True).gaussian(0, 1)
        h = autograd.matmul(x, w)
        z = autograd.add_bias(h, b)
        a = autograd.tanh(z)
        loss = autograd.mse_loss(a, t)

        da = loss.creator.backward()  # 1.0 by default; the target is no input (SINGA)
        assert da.shape == a.shape
        dz = a.creator.backward(da)
        dh, db = z.creator.backward(tensor.from_raw_tensor(dz))
        dx, dw = h.creator.backward(dh)

        want = autograd.gradients(loss)  # SINGA indexes it by id(param)
        np.testing.assert_allclose(dw.data, want[id(w)].data, rtol=1e-6)
        np.testing.assert_allclose(db.data, want[b].data, rtol=1e-6)
        assert dx.shape == x.shape
    finally:
        autograd.training = False


def test_several_outputs_and_errors():
    x = tensor.from_numpy(rng.standard_normal((2, 6)).astype(np.float32))
    x.requires_grad = True
    parts = autograd.split(x, 1, [2, 4])
    dx = parts[0].creator.backward(np.ones((2, 2)), np.full((2, 4), 2.0))
    np.testing.assert_array_equal(dx.data, np.concatenate([np.ones((2, 2)),
                                                           np.full((2, 4), 2.0)], 1))
    with pytest.raises(sg.GraphError, match="2 outputs"):
        parts[0].creator.backward(1.0)
    with sg.ir.building():
        y = autograd.relu(sg.Placeholder((2, 2)))
    with pytest.raises(sg.GraphError, match="concrete"):
        y.creator.backward(1.0)
    raw = tensor.from_raw_tensor(x)
    assert raw.creator is None and raw.data is x.data
