"""SINGA 3 functions built from ops: embedding, clip, cossim, ranking_loss,
binary_cross_entropy, globalaveragepool('channels_last'), where with a list condition."""
import numpy as np
import pytest

import singa_graph as sg
from singa_graph import autograd, functional as F
from helpers import check_grad, eager, graph_matches_eager

rng = np.random.default_rng(7)


def test_embedding_rows_and_gradient_with_repeated_ids():
    w = rng.standard_normal((5, 3))
    ids = np.array([[0, 4], [4, 2]])
    np.testing.assert_array_equal(eager(lambda i, w_: F.embedding(i, w_), ids, w), w[ids])
    check_grad(lambda i, w_: F.embedding(i, w_), ids, w, wrt=[1])
    graph_matches_eager(lambda i, w_: F.embedding(i, w_), ids, w)
    with pytest.raises(sg.ShapeError, match="out of range"):
        eager(lambda i, w_: F.embedding(i, w_), np.array([5]), w)
    with pytest.raises(sg.DTypeError, match="integer"):
        sg.ops.take(sg.Placeholder((5, 3)), sg.Placeholder((2,), dtype="float32"))


@pytest.mark.parametrize("name,fn,ref,args", [
    ("clip", lambda x: F.clip(x, -0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), [(3, 4)]),
    ("cossim", F.cossim, lambda a, b: (a * b).sum(1) / np.linalg.norm(a, axis=1)
     / np.linalg.norm(b, axis=1), [(3, 4), (3, 4)]),
    ("ranking_loss", F.ranking_loss, lambda p, n: np.maximum(0, 0.2 - p + n).sum() / 4,
     [(4,), (4,)]),
    ("gap_channels_last", lambda x: F.globalaveragepool(x, "channels_last"),
     lambda x: x.mean((1, 2), keepdims=True), [(2, 3, 4, 5)]),
])
def test_composed_function(name, fn, ref, args):
    xs = [rng.standard_normal(s) for s in args]
    if name == "clip":  # keep finite differences away from the bounds
        xs[0] = np.where(np.abs(np.abs(xs[0] - 0.1) - 0.6) < 0.02, 0.0, xs[0])
    if name == "ranking_loss":
        xs[1] = np.where(np.abs(0.2 - xs[0] + xs[1]) < 0.02, xs[1] + 0.1, xs[1])
    np.testing.assert_allclose(eager(fn, *xs), ref(*xs), rtol=1e-12)
    check_grad(fn, *xs)
    graph_matches_eager(fn, *xs)


def test_binary_cross_entropy_and_where_with_list_condition():
    x, t = rng.uniform(0.1, 0.9, (4, 3)), (rng.random((4, 3)) > 0.5).astype(float)
    want = -(t * np.log(x) + (1 - t) * np.log(1 - x)).sum() / 4
    np.testing.assert_allclose(eager(F.binary_cross_entropy, x, t), want, rtol=1e-12)
    check_grad(F.binary_cross_entropy, x, t, wrt=[0])
    a, b = rng.standard_normal((2, 2)), rng.standard_normal((2, 2))
    got = eager(lambda a_, b_: autograd.where(a_, b_, [[True, False], [False, True]]), a, b)
    np.testing.assert_array_equal(got, np.where([[True, False], [False, True]], a, b))
    with pytest.raises(ValueError, match="channels"):
        F.globalaveragepool(sg.Placeholder((2, 3, 4, 4)), "nhwc")
    with pytest.raises(sg.ShapeError, match="cossim"):
        F.cossim(sg.Placeholder((2, 3)), sg.Placeholder((3, 3)))
    with pytest.raises(sg.ShapeError, match="ranking_loss"):
        F.ranking_loss(sg.Placeholder((4,)), sg.Placeholder((3,)))
    with pytest.raises(sg.ShapeError, match="4-d"):
        F.globalaveragepool(sg.Placeholder((2, 3, 4)))
