"""LayerNorm and scaled dot-product attention against PyTorch, float64 finite differences,
and compiled plans against eager mode."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the reference implementation

from singa_graph import autograd  # noqa: E402
from singa_graph.errors import ShapeError
from singa_graph.ir import Placeholder, building
from tests.helpers import check_grad, eager, graph_matches_eager

rng = np.random.default_rng(0)


def _ln(x, g, b):
    return autograd.layer_norm(x, g, b)


@pytest.mark.parametrize("shape", [(2, 3, 8), (5, 16)])
def test_layer_norm_matches_torch(shape):
    x = rng.standard_normal(shape) * 3 + 7  # |mean| >> std
    g, b = rng.standard_normal(shape[-1]), rng.standard_normal(shape[-1])
    ref = torch.nn.functional.layer_norm(torch.tensor(x), shape[-1:], torch.tensor(g),
                                         torch.tensor(b)).numpy()
    np.testing.assert_allclose(eager(_ln, x, g, b), ref, rtol=1e-12, atol=1e-12)
    check_grad(_ln, x, g, b)


@pytest.mark.parametrize("shape", [(130, 64), (3, 769), (4, 1)])
@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_float32_layer_norm_is_as_close_as_its_input(shape, offset):
    """float32 rows are normalised in float32 (the mean rounded, then its rest): a mean
    1000 standard deviations from zero costs no precision."""
    x = (rng.standard_normal(shape) + offset).astype(np.float32)
    g, b = (rng.standard_normal(shape[-1]).astype(np.float32) for _ in range(2))
    got = eager(_ln, x, g, b)
    x64 = x.astype(np.float64)
    mu, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(var + 1e-5) * g + b
    # (x - mt) is exact near the mean; rounded once as a whole, the mean alone would be
    # off by up to half an ulp of 1000 (3e-5 standard deviations)
    assert np.abs(got - ref).max() <= 2e-6 * np.abs(ref).max()


def test_layer_norm_two_normalized_axes_and_float32_plan():
    x = rng.standard_normal((3, 4, 5))
    g, b = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    f = lambda x, g, b: autograd.layer_norm(x, g, b, normalized_ndim=2)  # noqa: E731
    ref = torch.nn.functional.layer_norm(torch.tensor(x), (4, 5), torch.tensor(g),
                                         torch.tensor(b)).numpy()
    np.testing.assert_allclose(eager(f, x, g, b), ref, rtol=1e-12, atol=1e-12)
    check_grad(f, x, g, b)
    graph_matches_eager(_ln, *(a.astype(np.float32) for a in (x, g[0], b[0])))


def _reference(q, k, v, mask, causal):
    tm = None if mask is None else torch.tensor(mask)
    sq, sk = q.shape[2], k.shape[2]
    if causal and tm is not None:
        keep = torch.ones(sq, sk, dtype=torch.bool).tril()
        tm = tm & keep if tm.dtype == torch.bool else tm.masked_fill(~keep, float("-inf"))
    return torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a) for a in (q, k, v)), attn_mask=tm,
        is_causal=causal and tm is None).numpy()


def _swap(a):
    return np.ascontiguousarray(a.transpose(0, 2, 1, 3))


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_torch_and_finite_differences(layout, mask_kind, causal):
    q, k = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 6, 4))
    v = rng.standard_normal((2, 3, 6, 3))
    mask = None
    if mask_kind == "bool":
        mask = rng.random((5, 6)) > 0.3
        mask[:, 0] = True  # no row fully masked
    elif mask_kind == "float":
        mask = rng.standard_normal((2, 1, 5, 6))
    ref = _reference(q, k, v, mask, causal)
    tr = (lambda a: a) if layout == "bhsd" else _swap
    args = [tr(q), tr(k), tr(v)] + ([] if mask is None else [mask])

    def f(q, k, v, m=None):
        return autograd.scaled_dot_product_attention(q, k, v, mask=m, causal=causal,
                                                     layout=layout)

    np.testing.assert_allclose(tr(eager(f, *args)), ref, rtol=1e-12, atol=1e-12)
    check_grad(f, *args, wrt=[0, 1, 2])


@pytest.mark.parametrize("n_heads", [1, 20])  # fewer and more slices than workspace chunks
def test_attention_plan_equals_eager_bitwise(n_heads):
    q, k, v = (rng.standard_normal((2, 7, n_heads, 8)).astype(np.float32) for _ in range(3))
    mask = rng.random((7, 7)) > 0.2
    mask[:, 0] = True
    graph_matches_eager(lambda q, k, v, m: autograd.scaled_dot_product_attention(
        q, k, v, m, causal=True, layout="bshd"), q, k, v, mask)


def test_attention_scale_and_float32():
    q, k, v = (rng.standard_normal((1, 2, 9, 4)).astype(np.float32) for _ in range(3))
    got = eager(lambda q, k, v: autograd.scaled_dot_product_attention(q, k, v, scale=0.3),
                q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a) for a in (q, k, v)), scale=0.3).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_attention_shape_errors():
    with building():
        q = Placeholder((2, 3, 5, 4), np.float32)
        with pytest.raises(ShapeError, match="mask"):
            autograd.scaled_dot_product_attention(q, q, q, Placeholder((4, 5), np.bool_))
        with pytest.raises(ShapeError, match="do not agree"):
            autograd.scaled_dot_product_attention(q, Placeholder((2, 3, 5, 6), np.float32), q)
        with pytest.raises(ShapeError, match="normalized shape"):
            autograd.layer_norm(q, Placeholder((5,), np.float32), Placeholder((5,), np.float32))
