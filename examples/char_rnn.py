"""Train a character-level LSTM (Embedding -> LSTM -> Linear) to predict the next character
of a short text, in graph mode, in the layout of SINGA's examples/rnn/char_rnn.py.

    python examples/char_rnn.py --epochs 30
    python examples/char_rnn.py --epochs 1 --dump pics/   # pictures of the training plan
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from singa_graph import autograd, device, layer, model, opt, random as sg_random, tensor
from singa_graph.cli import device_spec, float_in, int_at_least

TEXT = ("the quick brown fox jumps over the lazy dog. " * 3
        + "singa builds the whole training step as one graph and plans its memory. ") * 2


class CharRNN(model.Model):
    """Embedding of the ids, an LSTM over the timesteps, a Linear read-out per step."""

    def __init__(self, vocab_size, hidden_size=32, embed_size=16):
        super().__init__()
        self.embed = layer.Embedding(vocab_size, embed_size)
        self.rnn = layer.LSTM(embed_size, hidden_size)
        self.cat = layer.Cat()
        self.dense = layer.Linear(vocab_size)
        self.loss = layer.SoftMaxCrossEntropy()
        self.hidden_size = hidden_size

    def forward(self, ids):
        n, steps = ids.shape
        e = self.embed(ids)  # (N, T, E)
        xs = [autograd.reshape(p, (n, -1)) for p in autograd.split(e, 1, [1] * steps)]
        zeros = tensor.Tensor((n, self.hidden_size), ids.device, requires_grad=False)
        hs, _, _ = self.rnn(xs, (zeros, zeros))
        return self.dense(self.cat(hs))  # (T*N, vocab), time-major as the hs

    def train_one_batch(self, ids, next_ids):
        out = self.forward(ids)
        labels = autograd.reshape(autograd.transpose(next_ids, (1, 0)), (-1,))
        loss = self.loss(out, labels)
        self.optimizer(loss)
        return out, loss


def batches(text, seq_len, batch_size, rng):
    """Random windows of the text as ids (N, T) and the ids one step later."""
    vocab = sorted(set(text))
    ids = np.array([vocab.index(c) for c in text], np.int32)
    starts = rng.integers(0, len(ids) - seq_len - 1, batch_size)
    x = np.stack([ids[s:s + seq_len] for s in starts])
    y = np.stack([ids[s + 1:s + seq_len + 1] for s in starts])
    return vocab, x, y


def main(argv=None) -> list[float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int_at_least(0), default=30)
    p.add_argument("--steps", type=int_at_least(1), default=10, help="batches per epoch")
    p.add_argument("--batch-size", type=int_at_least(1), default=16)
    p.add_argument("--seq-len", type=int_at_least(1), default=12)
    p.add_argument("--hidden", type=int_at_least(1), default=32)
    p.add_argument("--lr", type=float_in(0.0, low_open=True), default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--device", type=device_spec, default="cpu",
                   help="cpu (default), cuda or cuda:N")
    p.add_argument("--dump", metavar="DIR", default=None,
                   help="write pictures of the training plan into DIR (graph, schedule and "
                   "memory timeline: html, dot, json, memory.svg, ...)")
    args = p.parse_args(argv)

    sg_random.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    vocab, x, y = batches(TEXT, args.seq_len, args.batch_size, rng)
    m = CharRNN(len(vocab), args.hidden)
    m.set_optimizer(opt.SGD(lr=args.lr, momentum=0.9))
    m.compile([tensor.from_numpy(x, device.parse(args.device))], is_train=True,
              use_graph=True)
    losses, start = [], time.perf_counter()
    for epoch in range(args.epochs):
        total = 0.0
        for _ in range(args.steps):
            _, x, y = batches(TEXT, args.seq_len, args.batch_size, rng)
            _, loss = m(x, y)
            total += loss.to_numpy().item()
        losses.append(total / args.steps)
        if not args.quiet:
            print(f"epoch {epoch}: loss {losses[-1]:.3f}")
    if not args.quiet:
        print(f"{args.epochs} epochs in {time.perf_counter() - start:.1f}s; "
              f"memory: {m.memory_report()}")
    if args.dump:
        from singa_graph import viz

        plan = m.plan_for(x, y)  # the cached training plan (compiled if no epoch ran)
        print(f"wrote {', '.join(viz.dump_all(plan, args.dump, 'train'))}")
    return losses


if __name__ == "__main__":
    main()
