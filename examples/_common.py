"""Shared command line and training loop of the examples.

Every example builds a parser with :func:`parser`, adds its own options, loads data with
:func:`load_data` and calls :func:`train`, which returns the final test accuracy::

    python examples/cnn.py --graph --epochs 10
    python examples/mlp.py --eager --schedule topological --limit 200
    python examples/cnn.py --mnist ~/data/mnist      # MNIST IDX files instead of digits
    mpiexec -n 2 python examples/cnn.py --dist       # data-parallel over two processes
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from singa_graph import data, opt, random as sg_random
from singa_graph import device as sg_device, tensor
from singa_graph.cli import device_spec, float_in, int_at_least

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - tqdm is in the 'examples' extra
    tqdm = None

SCHEDULES = ("sequential", "topological", "memory")
MiB = float(1 << 20)


def parser(description: str, *, epochs=3, batch_size=64, lr=0.05, momentum=0.9,
           weight_decay=0.0) -> argparse.ArgumentParser:
    """The options every example accepts; per-example defaults as keyword arguments."""
    p = argparse.ArgumentParser(description=description)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--graph", dest="graph", action="store_true", default=True,
                      help="compile whole training steps into scheduled graphs (default)")
    mode.add_argument("--eager", dest="graph", action="store_false",
                      help="run the same model eagerly, op by op")
    p.add_argument("--schedule", choices=SCHEDULES, default="memory",
                   help="order in which graph nodes run (default: %(default)s)")
    p.add_argument("--epochs", type=int_at_least(0), default=epochs,
                   help="default: %(default)s")
    p.add_argument("--batch-size", type=int_at_least(1), default=batch_size,
                   help="default: %(default)s")
    p.add_argument("--lr", type=float_in(0.0, low_open=True), default=lr,
                   help="SGD learning rate (%(default)s)")
    p.add_argument("--momentum", type=float_in(0.0, 1.0), default=momentum,
                   help="SGD momentum, in [0, 1) (%(default)s)")
    p.add_argument("--weight-decay", type=float_in(0.0), default=weight_decay,
                   help="SGD weight decay (%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of initialisers and shuffling")
    p.add_argument("--mnist", metavar="PATH", default=None,
                   help="folder with the MNIST IDX files, used instead of sklearn's digits")
    p.add_argument("--limit", type=int_at_least(1), default=None, metavar="N",
                   help="train on the first N training samples only (and test on at most N)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--dump", metavar="DIR", default=None,
                   help="write pictures of the training and inference plans into DIR (graph, "
                   "schedule and memory timeline: html, dot, json, memory.svg, ...)")
    p.add_argument("--device", type=device_spec, default="cpu", metavar="DEVICE",
                   help="cpu (default), cuda or cuda:N: where parameters live and kernels "
                   "run (a GPU needs pip install 'singa_graph[cuda]')")
    p.add_argument("--dist", action="store_true",
                   help="data-parallel over the processes of `mpiexec -n N` (DistOpt): each "
                   "rank trains on its own shard with --batch-size samples per step")
    return p


def make_device(spec: str):
    """The device of ``--device``; a clear message and exit when it is not available."""
    from singa_graph.errors import DeviceError

    try:
        return sg_device.parse(spec)
    except DeviceError as e:
        raise SystemExit(f"--device {spec}: {e}") from None


def load_data(args, image_size: int | None = None, mode: str = "pad", channels: int = 1):
    """``(x_train, y_train, x_test, y_test)`` from ``--mnist PATH`` or sklearn's digits.

    Images are NCHW float32; ``image_size`` pads (``mode='pad'``) or upsamples
    (``mode='nearest'``) them, ``channels`` repeats the gray channel (e.g. 3 for RGB models).
    """
    if args.mnist:
        xtr, ytr, xte, yte = data.load_mnist(args.mnist)
        if image_size is not None and image_size != xtr.shape[-1]:
            xtr = data.resize_images(xtr, image_size, "pad")
            xte = data.resize_images(xte, image_size, "pad")
    else:
        xtr, ytr, xte, yte = data.load_digits(seed=args.seed, pad_to=image_size, mode=mode)
    if args.limit:
        xtr, ytr = xtr[:args.limit], ytr[:args.limit]
        xte, yte = xte[:args.limit], yte[:args.limit]
    if channels != 1:
        xtr, xte = (np.repeat(a, channels, axis=1) for a in (xtr, xte))
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    return f32(xtr), ytr.astype(np.int32), f32(xte), yte.astype(np.int32)


def _silent(*args, **kwargs):
    pass


def _bar(it, total, desc, quiet):
    if quiet or tqdm is None:
        return it
    return tqdm(it, total=total, desc=desc, leave=False, dynamic_ncols=True, file=sys.stderr,
                disable=None)  # None: no bar when stderr is not a terminal


def evaluate(model, x, y, batch_size: int) -> float:
    """Accuracy of ``model`` in eval mode, including the last partial batch."""
    model.eval()
    correct = 0
    for xb, yb in data.iterate_minibatches(x, y, batch_size, shuffle=False, drop_last=False):
        out = model(xb)
        correct += int((np.argmax(out.to_numpy(), axis=1) == yb).sum())
    model.train()
    return correct / max(len(x), 1)


def format_memory(reports: dict) -> str:
    """A table of memory reports: ``{label: model.memory_report()}``. The arena holds every
    transient buffer and all kernel workspace; ``plan total`` adds the persistent buffers
    the plan created (feeds, outputs, optimizer state)."""
    head = (f"{'plan':<24} {'schedule':<10} {'arena MiB':>10} {'of it ws':>9} "
            f"{'lower bd':>9} {'no-reuse':>9} {'plan total':>11} {'params+state':>13} "
            f"{'arena/lower':>12}")
    lines = [head, "-" * len(head)]
    for label, r in reports.items():
        lines.append(f"{label:<24} {r['schedule']:<10} {r['arena_bytes'] / MiB:>10.3f} "
                     f"{r['workspace_peak_bytes'] / MiB:>9.3f} "
                     f"{r['lower_bound_bytes'] / MiB:>9.3f} {r['no_reuse_bytes'] / MiB:>9.3f} "
                     f"{r['plan_bytes'] / MiB:>11.3f} {r['persistent_bytes'] / MiB:>13.3f} "
                     f"{r['arena_over_lower_bound']:>12.3f}")
    return "\n".join(lines)


def _dump(model, args, stem: str) -> None:
    """With ``--dump DIR``: every picture of the plan that just ran, as ``DIR/stem.*``."""
    if getattr(args, "dump", None):
        from singa_graph import viz

        paths = viz.dump_all(model.last_plan, args.dump, stem)
        print(f"wrote {', '.join(paths)}")


def train(model, args, dataset, name: str = "model") -> float:
    """Train ``model`` (a ``zoo``-style classifier) on ``dataset``; returns test accuracy.

    The model is compiled for ``args.batch_size`` in graph or eager mode; each epoch shows a
    progress bar with the running loss and accuracy, then the test accuracy. In graph mode the
    memory reports of the training and inference plans are printed at the end.
    """
    xtr, ytr, xte, yte = dataset
    if getattr(args, "dump", None) and not args.graph:
        raise SystemExit("--dump draws compiled plans: it needs graph mode, not --eager")
    bs = min(args.batch_size, len(xtr))
    sg_random.seed(args.seed)
    sgd = opt.SGD(lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    rank, world = 0, 1
    if getattr(args, "dist", False):
        from singa_graph.dist import DistOpt

        sgd = DistOpt(sgd)  # rank 0's initial parameters reach every rank at the first step
        rank, world = sgd.global_rank, sgd.world_size
        bs = min(bs, len(xtr) // world)
    say = print if rank == 0 else _silent  # one rank reports
    model.set_optimizer(sgd)
    dev = make_device(getattr(args, "device", "cpu"))
    x0 = tensor.Tensor((bs,) + xtr.shape[1:], dev)  # parameters go where the input lives
    model.compile([x0], is_train=True, use_graph=args.graph, schedule=args.schedule)
    mode = f"graph, schedule={args.schedule}" if args.graph else "eager"
    if dev.kind != "cpu":
        mode += f", on {dev}"
    if world > 1:
        mode += f", {world} ranks x batch {bs}"
    say(f"{name}: {len(xtr)} training / {len(xte)} test samples of shape {xtr.shape[1:]}, "
        f"batch {bs}, {args.epochs} epochs ({mode})")
    steps = len(xtr) // world // bs
    reports = {}
    acc = 0.0
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        tot_loss = tot_correct = seen = 0
        if world > 1:
            from singa_graph.dist import iterate_shard

            batches = iterate_shard(xtr, ytr, bs, rank, world, epoch=epoch, seed=args.seed)
        else:
            batches = data.iterate_minibatches(xtr, ytr, bs, seed=args.seed + epoch)
        bar = _bar(batches, steps, f"epoch {epoch + 1}/{args.epochs}", args.quiet or rank)
        for xb, yb in bar:
            out, loss = model(xb, yb)
            tot_loss += loss.to_numpy().item() * len(yb)
            tot_correct += int((np.argmax(out.to_numpy(), axis=1) == yb).sum())
            seen += len(yb)
            if bar is not None and hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{tot_loss / seen:.4f}", acc=f"{tot_correct / seen:.3f}")
        if args.graph and epoch == 0:
            reports[f"train step (batch {bs})"] = model.memory_report()
            _dump(model, args, "train")
        acc = evaluate(model, xte, yte, bs)
        say(f"epoch {epoch + 1}/{args.epochs}: loss {tot_loss / max(seen, 1):.4f}, "
            f"train acc {tot_correct / max(seen, 1):.4f}, test acc {acc:.4f} "
            f"({time.perf_counter() - t0:.1f} s)", flush=True)
    if args.graph:
        if args.epochs > 0:
            model.eval()
            model(xte[:bs])
            reports[f"inference (batch {bs})"] = model.memory_report()
            _dump(model, args, "inference")
            model.train()
        if reports:
            say("\nmemory plans:")
            say(format_memory(reports))
    else:
        say("\n(eager mode: no static memory plan to report)")
    say(f"\nfinal test accuracy: {acc:.4f} ({time.perf_counter() - t0:.1f} s)")
    return acc

