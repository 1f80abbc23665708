"""Train a character-level GPT on the Python standard library's own source files, in graph
mode, and sample from it.

The text is every ``*.py`` file beside ``os.py`` (read at run time: it is on every machine
with Python), cut to ``--max-mib`` MiB; the last tenth is the validation set. Characters
outside printable ASCII become ``?``. The model: token and position embeddings, ``--blocks``
pre-norm transformer blocks with causal self-attention, a final LayerNorm and a separate (or,
with ``--tied``, the embedding's) read-out. Each epoch prints the validation loss beside the
unigram baseline (the cross-entropy of the training text's character frequencies)::

    python examples/gpt.py                      # a few minutes on 2 cores
    python examples/gpt.py --epochs 1 --dump pics/ --device cuda
"""
from __future__ import annotations

import argparse
import glob
import os
import string
import time

import numpy as np

from singa_graph import autograd, device, layer, model, opt, random as sg_random, tensor
from singa_graph.cli import device_spec, float_in, int_at_least

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - tqdm is in the 'examples' extra
    tqdm = None

VOCAB = sorted(set(string.printable) - set("\x0b\x0c\r"))


def stdlib_text(max_bytes: int) -> str:
    """The standard library's top-level ``*.py`` sources, concatenated in name order."""
    parts, size = [], 0
    for path in sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            parts.append(f.read())
        size += len(parts[-1])
        if size >= max_bytes:
            break
    return "".join(parts)[:max_bytes]


def encode(text: str) -> np.ndarray:
    """Character ids in :data:`VOCAB`; anything else becomes ``?``."""
    table = np.full(0x110000, VOCAB.index("?"), np.int32)
    codes = np.array([ord(c) for c in VOCAB])
    table[codes] = np.arange(len(VOCAB), dtype=np.int32)
    return table[np.frombuffer(text.encode("utf-32-le"), np.uint32)]


class GPT(model.Model):
    """Token + position embeddings, pre-norm causal blocks, LayerNorm, read-out."""

    def __init__(self, vocab_size, seq_len, d_model=64, num_heads=4, blocks=2, tied=False):
        super().__init__()
        self.tok = layer.Embedding(vocab_size, d_model)
        self.pos = layer.PositionEmbedding(seq_len, d_model)
        self.blocks = [layer.TransformerBlock(d_model, num_heads, causal=True)
                       for _ in range(blocks)]
        self.ln = layer.LayerNorm(d_model)
        self.tied = bool(tied)
        if not self.tied:
            self.head = layer.Linear(vocab_size)
        self.loss = layer.SoftMaxCrossEntropy()
        self.vocab_size = vocab_size

    def forward(self, ids):
        n, s = ids.shape
        h = self.pos(self.tok(ids))
        for blk in self.blocks:
            h = blk(h)
        h = autograd.reshape(self.ln(h), (n * s, -1))
        if self.tied:
            return autograd.matmul(h, autograd.transpose(self.tok.W, (1, 0)))
        return self.head(h)  # (N*S, vocab): logits of the next character at every position

    def train_one_batch(self, ids, next_ids):
        out = self.forward(ids)
        loss = self.loss(out, autograd.reshape(next_ids, (-1,)))
        self.optimizer(loss)
        return out, loss


def windows(ids, seq_len, starts):
    """Inputs ``(N, T)`` and the ids one step later, from window starts."""
    idx = starts[:, None] + np.arange(seq_len)
    return ids[idx], ids[idx + 1]


def unigram_loss(train, val, vocab_size) -> float:
    """Cross-entropy (nats/char) of the validation text under the training text's character
    frequencies (add-one smoothing)."""
    p = np.bincount(train, minlength=vocab_size) + 1.0
    return float(-np.mean(np.log(p / p.sum())[val]))


def validation_loss(m, val, seq_len, batch_size) -> float:
    starts = np.arange(0, len(val) - seq_len - 1, seq_len)[:8 * batch_size]
    starts = starts[:len(starts) // batch_size * batch_size]
    total = 0.0
    for i in range(0, len(starts), batch_size):
        x, y = windows(val, seq_len, starts[i:i + batch_size])
        _, loss = m.evaluate(x, y.reshape(-1))
        total += loss.to_numpy().item()
    return total / max(1, len(starts) // batch_size)


def sample(m, context, n, seq_len, rng, temperature=0.8) -> str:
    """``n`` characters drawn one at a time from the model, after ``context``."""
    ids = list(context[-seq_len:])
    for _ in range(n):
        logits = m.evaluate(np.array([ids[-seq_len:]], np.int32)).to_numpy()[-1]
        z = logits.astype(np.float64) / temperature
        p = np.exp(z - z.max())
        ids.append(int(rng.choice(len(p), p=p / p.sum())))
    return "".join(VOCAB[i] for i in ids[seq_len:])


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int_at_least(0), default=3)
    p.add_argument("--steps", type=int_at_least(1), default=150, help="batches per epoch")
    p.add_argument("--batch-size", type=int_at_least(1), default=32)
    p.add_argument("--seq-len", type=int_at_least(2), default=64)
    p.add_argument("--d-model", type=int_at_least(1), default=64)
    p.add_argument("--heads", type=int_at_least(1), default=4)
    p.add_argument("--blocks", type=int_at_least(1), default=2)
    p.add_argument("--tied", action="store_true", help="read out with the embedding table")
    p.add_argument("--lr", type=float_in(0.0, low_open=True), default=3e-3, help="Adam")
    p.add_argument("--max-mib", type=float_in(0.0, low_open=True), default=4.0,
                   help="MiB of standard-library source to read (%(default)s)")
    p.add_argument("--sample", type=int_at_least(0), default=300,
                   help="characters to sample after training (%(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bar, no per-epoch lines")
    p.add_argument("--device", type=device_spec, default="cpu",
                   help="cpu (default), cuda or cuda:N")
    p.add_argument("--dump", metavar="DIR", default=None,
                   help="write pictures of the training plan into DIR (graph, schedule and "
                   "memory timeline: html, dot, json, memory.svg, ...)")
    args = p.parse_args(argv)

    sg_random.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    ids = encode(stdlib_text(int(args.max_mib * (1 << 20))))
    cut = len(ids) * 9 // 10
    train, val = ids[:cut], ids[cut:]
    baseline = unigram_loss(train, val, len(VOCAB))
    dev = device.parse(args.device)
    m = GPT(len(VOCAB), args.seq_len, args.d_model, args.heads, args.blocks, args.tied)
    m.set_optimizer(opt.Adam(lr=args.lr))
    x0, _ = windows(train, args.seq_len, np.zeros(args.batch_size, np.int64))
    m.compile([tensor.from_numpy(x0, dev)], is_train=True, use_graph=True)
    if not args.quiet:
        print(f"{len(ids) / (1 << 20):.2f} MiB of text, {len(VOCAB)} symbols; "
              f"unigram baseline {baseline:.3f} nats/char")
    history, start = [], time.perf_counter()
    for epoch in range(args.epochs):
        steps = range(args.steps)
        bar = None
        if tqdm is not None and not args.quiet:
            bar = steps = tqdm(steps, desc=f"epoch {epoch}", leave=False)
        total = 0.0
        for _ in steps:
            x, y = windows(train, args.seq_len,
                           rng.integers(0, len(train) - args.seq_len - 1, args.batch_size))
            _, loss = m(x, y)
            total += loss.to_numpy().item()
            if bar is not None:
                bar.set_postfix(loss=f"{loss.to_numpy().item():.3f}")
        vl = validation_loss(m, val, args.seq_len, args.batch_size)
        history.append({"train": total / args.steps, "val": vl, "unigram": baseline})
        m.train()
        if not args.quiet:
            print(f"epoch {epoch}: train loss {total / args.steps:.3f}, validation loss "
                  f"{vl:.3f} (unigram baseline {baseline:.3f})")
    if not args.quiet:
        print(f"{args.epochs} epochs in {time.perf_counter() - start:.1f}s; "
              f"memory: {m.memory_report()}")
    if args.sample:
        text = sample(m, val[:args.seq_len], args.sample, args.seq_len, rng)
        m.train()
        if not args.quiet:
            print("sample:\n" + text)
    if args.dump:
        from singa_graph import viz

        x, y = windows(train, args.seq_len, np.zeros(args.batch_size, np.int64))
        plan = m.plan_for(x, y)  # the cached training plan (compiled if no epoch ran)
        print(f"wrote {', '.join(viz.dump_all(plan, args.dump, 'train'))}")
    return {"history": history, "unigram": baseline}


if __name__ == "__main__":
    main()
