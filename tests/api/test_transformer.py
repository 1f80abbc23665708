"""Transformer layers against PyTorch: a 2-block pre-norm encoder with PyTorch's weights
copied in (forward, loss and every gradient to 1e-5 relative, in float64), the compiled plan
against eager mode bit for bit, and the layers' shape errors."""
import numpy as np
import pytest
import torch

from singa_graph import autograd, layer
from singa_graph.errors import ShapeError
from singa_graph.ir import Graph, Placeholder, building
from singa_graph.ir.tensor import Tensor
from singa_graph.ops import mul, sum as _sum
from singa_graph.passes import compile
from singa_graph.passes.autodiff import autodiff

B, S, E, H, F = 2, 6, 16, 4, 32


class Encoder(layer.Layer):
    def __init__(self, causal):
        super().__init__()
        self.blocks = [layer.TransformerBlock(E, H, F, causal=causal) for _ in range(2)]
        self.ln = layer.LayerNorm(E)

    def forward(self, x, mask=None):
        for blk in self.blocks:
            x = blk(x, mask)
        return self.ln(x)


def _torch_encoder():
    torch.manual_seed(0)
    block = torch.nn.TransformerEncoderLayer(E, H, F, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True)
    enc = torch.nn.TransformerEncoder(block, 2, norm=torch.nn.LayerNorm(E),
                                      enable_nested_tensor=False).double()
    for p in enc.parameters():  # LayerNorm starts at ones/zeros: move it off them
        torch.nn.init.normal_(p, std=0.3)
    return enc


def _copy_in(ours, enc):
    """{our parameter: the matching torch parameter (as our layout)}."""
    pairs = {}
    for blk, tb in zip(ours.blocks, enc.layers):
        wi, bi = tb.self_attn.in_proj_weight, tb.self_attn.in_proj_bias
        wq, wk, wv = ((wi, slice(i * E, (i + 1) * E)) for i in range(3))
        bq, bk, bv = ((bi, slice(i * E, (i + 1) * E)) for i in range(3))
        a = blk.attn
        for p, t, tr in ((a.Wq, wq, True), (a.Wk, wk, True), (a.Wv, wv, True),
                         (a.bq, bq, False), (a.bk, bk, False), (a.bv, bv, False),
                         (a.Wo, tb.self_attn.out_proj.weight, True),
                         (a.bo, tb.self_attn.out_proj.bias, False),
                         (blk.W1, tb.linear1.weight, True), (blk.b1, tb.linear1.bias, False),
                         (blk.W2, tb.linear2.weight, True), (blk.b2, tb.linear2.bias, False),
                         (blk.ln1.scale, tb.norm1.weight, False),
                         (blk.ln1.bias, tb.norm1.bias, False),
                         (blk.ln2.scale, tb.norm2.weight, False),
                         (blk.ln2.bias, tb.norm2.bias, False)):
            pairs[p] = (t, tr)
    pairs[ours.ln.scale] = (enc.norm.weight, False)
    pairs[ours.ln.bias] = (enc.norm.bias, False)
    for p, (t, tr) in pairs.items():
        np.copyto(p.data, _as_ours(t, tr, lambda t: t.detach()))
    return pairs


def _as_ours(t, transpose, what):
    """``what(t)`` (a torch tensor's value or gradient) in our layout; ``t`` may be
    ``(tensor, rows)``, the rows of PyTorch's packed q/k/v projection."""
    t, rows = t if isinstance(t, tuple) else (t, slice(None))
    v = what(t)[rows].numpy()
    return v.T if transpose else v


@pytest.mark.parametrize("how", ["causal", "float mask", "bool mask"])
def test_two_block_encoder_matches_torch(how):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, S, E))
    w = rng.standard_normal((B, S, E))
    keep = np.tril(np.ones((S, S), bool))
    tmask = None
    mask = None
    if how == "float mask":
        mask = rng.standard_normal((S, S))
        tmask = torch.tensor(mask)
    elif how == "bool mask":
        mask = keep | (rng.random((S, S)) > 0.5)
        tmask = torch.tensor(~mask)  # torch's boolean masks mark the positions to drop
    enc = _torch_encoder()
    tx = torch.tensor(x, requires_grad=True)
    if how == "causal":
        ty = enc(tx, mask=torch.nn.Transformer.generate_square_subsequent_mask(
            S, dtype=torch.float64), is_causal=True)
    else:
        ty = enc(tx, mask=tmask)
    tloss = (ty * torch.tensor(w)).sum()
    tloss.backward()

    ours = Encoder(causal=how == "causal")
    xt = Tensor(data=x.copy(), requires_grad=True, stores_grad=True)
    mt = None if mask is None else Tensor(data=mask, requires_grad=False)
    ours(xt, mt)  # creates the parameters
    pairs = _copy_in(ours, enc)
    y = ours(xt, mt)
    loss = _sum(mul(y, Tensor(data=w, requires_grad=False)))
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(loss.data, tloss.item(), rtol=1e-5)
    grads = {id(p): g.data for p, g in autograd.backward(loss)}
    assert len(pairs) == 2 * 16 + 2
    for p, (t, tr) in pairs.items():
        np.testing.assert_allclose(grads[id(p)], _as_ours(t, tr, lambda t: t.grad),
                                   rtol=1e-5, atol=1e-9,
                                   err_msg=p.name)
    np.testing.assert_allclose(grads[id(xt)], tx.grad.numpy(), rtol=1e-5, atol=1e-9)


def test_encoder_plan_equals_eager_bitwise():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((B, S, E)).astype(np.float32)
    w = Tensor(data=rng.standard_normal((B, S, E)).astype(np.float32), requires_grad=False)
    ours = Encoder(causal=True)
    ours(Tensor(data=x))
    params = list(ours.get_params().values())
    y = ours(Tensor(data=x, requires_grad=False))
    eager = {id(p): g.data for p, g in autograd.backward(_sum(mul(y, w)))}
    with building():
        ph = Placeholder(x.shape, x.dtype)
        yg = ours(ph)
        g = Graph([yg])
        grads = autodiff(g, _sum(mul(yg, w)))
        g.add_outputs(*(grads[p] for p in params))
    got = compile(g, poison=True).run({ph: x})
    np.testing.assert_array_equal(got[0], y.data)
    for p, gp in zip(params, got[1:]):
        np.testing.assert_array_equal(gp, eager[id(p)], err_msg=p.name)


def test_shape_errors_name_the_layer():
    with pytest.raises(ShapeError, match="MultiHeadAttention"):
        layer.MultiHeadAttention(10, 3)
    mha = layer.MultiHeadAttention(8, 2)
    with building():
        x = Placeholder((2, 5, 8), np.float32)
        with pytest.raises(ShapeError, match="MultiHeadAttention.*mask"):
            mha(x, Placeholder((4, 5), np.bool_))
        pos = layer.PositionEmbedding(4, 8)
        with pytest.raises(ShapeError, match="PositionEmbedding.*longer"):
            pos(x)
        with pytest.raises(ShapeError, match="LayerNorm"):
            layer.LayerNorm(6)(x)


def test_gelu_layer_and_embedding_feed_attention():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4))
    for approx in ("none", "tanh"):
        got = layer.GELU(approx)(Tensor(data=x)).data
        ref = torch.nn.functional.gelu(torch.tensor(x), approximate=approx).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    emb, pos = layer.Embedding(11, 8), layer.PositionEmbedding(5, 8)
    mha = layer.MultiHeadAttention(8, 2, causal=True)
    ids = Tensor(data=rng.integers(0, 11, (2, 5)), requires_grad=False)
    y = mha(pos(emb(ids)))
    assert y.shape == (2, 5, 8)
    names = {p.name for p, _ in autograd.backward(_sum(y))}
    assert emb.W.name in names and pos.W.name in names
