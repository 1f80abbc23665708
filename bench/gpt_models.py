"""The GPT block model of bench/step_time.py in singa_graph and in PyTorch.

``blocks`` pre-norm causal transformer blocks (LayerNorm, 4 heads of self-attention with
q/k/v/out projections, LayerNorm, d -> 4d -> d GELU MLP, residuals), a final LayerNorm and
a per-position read-out to 10 classes, on ``(batch, seq, d)`` embeddings; the loss is the
mean cross-entropy over every position. PyTorch runs the same architecture with
``F.scaled_dot_product_attention(is_causal=True)`` (its fused CPU attention), and starts
from singa_graph's initial weights (:func:`copy_params`).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as tF

from torch_models import LR, MOMENTUM, TorchRunner

CLASSES = 10


def singa_gpt(blocks=4, d=128, heads=4):
    from singa_graph import autograd, layer, model

    class GPTBlocks(model.Model):
        def __init__(self):
            super().__init__()
            self.blocks = [layer.TransformerBlock(d, heads, causal=True)
                           for _ in range(blocks)]
            self.ln = layer.LayerNorm(d)
            self.head = layer.Linear(CLASSES)
            self.loss = layer.SoftMaxCrossEntropy()

        def forward(self, x):
            for blk in self.blocks:
                x = blk(x)
            return self.head(autograd.reshape(self.ln(x), (-1, d)))

        def train_one_batch(self, x, y):
            out = self.forward(x)
            loss = self.loss(out, y)
            self.optimizer(loss)
            return out, loss

    return GPTBlocks()


class _TorchBlock(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        h = self.ln1(x)
        q, k, v = (f(h).view(b, s, self.heads, -1).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        a = tF.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(tF.gelu(self.fc1(self.ln2(x))))


class TorchGPT(torch.nn.Module):
    def __init__(self, blocks=4, d=128, heads=4):
        super().__init__()
        self.blocks = torch.nn.ModuleList(_TorchBlock(d, heads) for _ in range(blocks))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, CLASSES)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x).reshape(-1, x.shape[-1]))


class TorchGPTRunner(TorchRunner):
    """:class:`torch_models.TorchRunner` (same step and memory measurement) on TorchGPT."""

    def __init__(self, kw, x, y):
        torch.manual_seed(0)
        self.model = TorchGPT(**kw)
        self.model.train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=MOMENTUM)
        self.x = torch.from_numpy(x)
        self.y = torch.from_numpy(y.astype(np.int64))
        self.first_loss = None


def copy_params(sg_model, tmodel) -> None:
    """singa_graph's initial weights into TorchGPT (Linear weights transposed)."""
    pairs = []
    for blk, tb in zip(sg_model.blocks, tmodel.blocks):
        a = blk.attn
        pairs += [(blk.ln1.scale, tb.ln1.weight), (blk.ln1.bias, tb.ln1.bias),
                  (a.Wq, tb.q.weight), (a.bq, tb.q.bias), (a.Wk, tb.k.weight),
                  (a.bk, tb.k.bias), (a.Wv, tb.v.weight), (a.bv, tb.v.bias),
                  (a.Wo, tb.o.weight), (a.bo, tb.o.bias),
                  (blk.ln2.scale, tb.ln2.weight), (blk.ln2.bias, tb.ln2.bias),
                  (blk.W1, tb.fc1.weight), (blk.b1, tb.fc1.bias),
                  (blk.W2, tb.fc2.weight), (blk.b2, tb.fc2.bias)]
    pairs += [(sg_model.ln.scale, tmodel.ln.weight), (sg_model.ln.bias, tmodel.ln.bias),
              (sg_model.head.W, tmodel.head.weight), (sg_model.head.b, tmodel.head.bias)]
    assert len(pairs) == len(list(tmodel.parameters()))
    with torch.no_grad():
        for p, tp in pairs:
            a = np.asarray(p.data)
            tp.copy_(torch.from_numpy(np.ascontiguousarray(a.T if a.ndim == 2 else a)))
