"""GatherND, ScatterND (and ScatterElements) reductions, TopK, CumProd and ReverseSequence
against numpy and PyTorch."""
import numpy as np
import pytest

from singa_graph import ops

from helpers import eager

torch = pytest.importorskip("torch")


def test_gather_nd_with_batch_dims_matches_numpy():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    idx = np.array([[[0, 1], [2, -1]], [[1, 3], [0, 0]]], np.int64)  # (2, 2, 2)
    got = eager(lambda a, i: ops.gather_nd(a, i, 1), x, idx)
    ref = np.stack([x[b][tuple(idx[b].T)] for b in range(2)])
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("red,ufunc", [("add", np.add), ("mul", np.multiply),
                                       ("max", np.maximum), ("min", np.minimum)])
def test_scatter_reductions_accumulate_duplicates(red, ufunc):
    x = np.random.default_rng(0).standard_normal((4, 3))
    idx = np.array([[1], [3], [1]], np.int64)
    upd = np.random.default_rng(1).standard_normal((3, 3))
    ref = x.copy()
    ufunc.at(ref, (idx[:, 0],), upd)
    np.testing.assert_allclose(eager(lambda a, i, u: ops.scatter_nd(a, i, u, red),
                                     x, idx, upd), ref)
    idx_e = np.array([[0, 2, 2]], np.int64)
    ref_e = x.copy()
    ufunc.at(ref_e, (np.zeros(3, int), idx_e[0]), upd[:1, :3][0])
    got_e = eager(lambda a, i, u: ops.scatter_elements(a, i, u, 1, red), x, idx_e, upd[:1])
    np.testing.assert_allclose(got_e, ref_e)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_pytorch(largest):
    x = np.random.default_rng(2).integers(-5, 5, (3, 9)).astype(np.float32)  # many ties
    v, i = eager(lambda a: ops.topk(a, 4, 1, largest), x)
    tv, _ = torch.topk(torch.from_numpy(x), 4, 1, largest=largest, sorted=True)
    np.testing.assert_array_equal(v, tv.numpy())
    np.testing.assert_array_equal(np.take_along_axis(x, i, 1), v)
    for r in range(3):  # equal values keep the lower index first
        for a, b in zip(i[r], i[r][1:]):
            assert x[r, a] != x[r, b] or a < b


def test_cumprod_modes_and_reverse_sequence():
    x = np.random.default_rng(3).uniform(0.5, 1.5, (3, 5))
    np.testing.assert_allclose(eager(lambda a: ops.cumprod(a, 1), x), np.cumprod(x, 1))
    excl_rev = np.cumprod(x[:, ::-1], 1)[:, ::-1]
    excl_rev = np.concatenate([excl_rev[:, 1:], np.ones((3, 1))], 1)
    np.testing.assert_allclose(eager(lambda a: ops.cumprod(a, 1, True, True), x), excl_rev)
    seq = np.arange(12.0).reshape(4, 3)  # (time, batch)
    lens = np.array([4, 2, 1], np.int64)
    got = eager(lambda a, n: ops.reverse_sequence(a, n, 1, 0), seq, lens)
    ref = seq.copy()
    for b, n in enumerate(lens):
        ref[:n, b] = seq[:n, b][::-1]
    np.testing.assert_array_equal(got, ref)


def test_unique_and_nms_on_concrete_tensors():
    x = np.array([[3, 1, 3], [2, 1, 5]], np.int64)
    y, idx, inv, counts = eager(lambda t: ops.unique(t, None, False), x)
    np.testing.assert_array_equal(y, [3, 1, 2, 5])
    np.testing.assert_array_equal(y[inv], x.ravel())
    np.testing.assert_array_equal(counts, [2, 2, 1, 1])
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 10, 1, 11]]], np.float32)
    scores = np.array([[[0.9, 0.95, 0.3]]], np.float32)
    sel = eager(lambda b, s: ops.non_max_suppression(b, s, 3, 0.5, 0.0), boxes, scores)
    np.testing.assert_array_equal(sel, [[0, 0, 1], [0, 0, 2]])


def test_value_dependent_ops_refuse_symbolic_inputs():
    from singa_graph.errors import ShapeError
    from singa_graph.ir.tensor import Placeholder

    with pytest.raises(ShapeError, match="depends on the values"):
        ops.unique(Placeholder((3,), np.float32))


def test_det_matches_numpy():
    x = np.random.default_rng(6).standard_normal((2, 3, 4, 4))
    x[0, 1, 2] = x[0, 1, 0]  # a singular one
    np.testing.assert_allclose(eager(ops.det, x), np.linalg.det(x), rtol=1e-10, atol=1e-12)


def test_tfidf_counts_skip_grams_and_unigrams_once():
    grams = {(2,): 0, (3,): 1, (2, 3): 2}
    op = ops.TfIdfVectorizer(grams, 3, 1, 2, 1, "TF")
    x = np.array([[2, 3, 2, 9, 3]], np.int64)
    # unigrams: 2 twice, 3 twice; bigrams (2, 3) at skip 1 (pos 0-1) and skip 2 (pos 2-4)
    np.testing.assert_array_equal(eager(lambda t: op(t), x), [[2, 2, 2]])
