"""Imported ONNX models: singa_graph against onnxruntime and PyTorch eager on the CPU.

torchvision classification models with random weights and BatchNorm statistics with a
spread (bench/torchvision_models.py) are exported by ``torch.onnx.export`` (opset 17,
symbolic batch), cached in ``--cache-dir``, and imported with ``singa_graph.onnx.load``.
Inputs are batch 2 at 64x64 (the small ViT is built for 64x64, the small Swin takes it).

Inference: the median ms of one forward call of singa_graph (the imported model's compiled
plan), onnxruntime (``InferenceSession``, default graph optimisations) and PyTorch eager
(the torchvision model under ``torch.no_grad()``). singa_graph's output is checked against
onnxruntime's (max |ours - ORT| / max |ORT|); a model that fails to import or mismatches
says so in its row. Targets: singa_graph / ORT median ratio <= 1.0 and worst <= 1.5.
``copies MiB``: the bytes the plan holds beside the model's parameters (its
``memory_report()``'s ``folded_bytes``: weights held in its kernels' layouts);
``--no-weight-copies`` runs ours with ``model.weight_copies = False``, which holds none.

Training (resnet18, mobilenet_v2, efficientnet_b0): one step (forward, softmax
cross-entropy, backward, SGD momentum 0.9) of the imported model against the same
torchvision model in PyTorch, from the same weights. The exported file is the eval-mode
graph, which has no Dropout, so PyTorch's Dropout and stochastic depth are switched off to
train the same function. The inference files have each BatchNorm folded into its conv by
the exporter (what a user exporting for inference gets); the training files keep the
BatchNormalization nodes, which use batch statistics while training, as PyTorch's do, so
both start from the same loss (printed). Target: <= 1.0x PyTorch.

How it is measured (bench/alternate.py): every framework runs in its own process
(``--worker``), with ``--threads`` threads (Numba's pool for singa_graph, intra-op threads
for onnxruntime and PyTorch; default: all cores). Each of ``--rounds`` rounds starts one
process per framework, one after the other, then times them in ``--bursts`` bursts of
``--steps`` calls (``--train-steps`` steps) taking turns, with ``--pause`` seconds of sleep
before each burst so that the others' thread pools are asleep: each framework runs alone,
and each burst has the other frameworks' bursts of the same round and index within a
fraction of a second. ms columns: the median over all timed calls; ratios: the median
over the bursts of the ratio of paired burst medians, which a host whose speed drifts over
seconds moves much less than a ratio of medians taken seconds apart.

    python bench/onnx_models.py [--models resnet18,vit_small,...] [--rounds 3] [--bursts 8]
                                [--threads N] [--no-train] [--no-weight-copies] [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

import alternate
import torchvision_models as tvm

LR, MOMENTUM = 0.01, 0.9
BATCH = 2
TRAIN_MODELS = ("resnet18", "mobilenet_v2", "efficientnet_b0")
INFER_FWS = ("ours", "ort", "torch")
TRAIN_FWS = ("ours", "torch")
MATCH_TOL = 1e-4  # max relative error against onnxruntime that counts as a match
TARGET_MEDIAN, TARGET_WORST, TARGET_TRAIN = 1.0, 1.5, 1.0


def _data(image: int):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((BATCH, 3, image, image)).astype(np.float32),
            rng.integers(0, 100, BATCH).astype(np.int32))


# ---------------------------------------------------------------------- worker processes
def _ours(path, mode, x, y, weight_copies=True):
    from singa_graph import onnx as sonnx
    from singa_graph import opt

    m = sonnx.load(path)
    if mode == "infer":
        m.weight_copies = weight_copies

        def infer():
            return m(x)
        infer.model = m
        return infer
    m.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM))
    m.compile([x], is_train=True, use_graph=True)
    m.train()
    return lambda: m(x, y)[1]  # the loss


def _ort(path, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _torch(name, mode, x, y, threads):
    import torch

    torch.set_num_threads(threads)
    model = tvm.build(name, image=x.shape[-1])
    xt = torch.from_numpy(x)
    if mode == "infer":
        def infer():
            with torch.no_grad():
                return model(xt)
        return infer
    model.train()
    for mod in model.modules():  # the exported eval graph has no dropout: train the same
        if isinstance(mod, torch.nn.Dropout) or type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
    sgd = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    yt = torch.from_numpy(y).long()

    def step():
        sgd.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        sgd.step()
        return loss
    return step


def _scalar(v) -> float:
    v = getattr(v, "data", v)
    return float(v.detach().numpy().ravel()[0]) if hasattr(v, "detach") else \
        float(np.asarray(v).ravel()[0])


def worker(args):
    """Build and warm up one framework on one model: ``(ready, fn)``, ``ready`` a JSON-able
    dict (with ``"error"`` where it failed, and then no ``fn``)."""
    image = tvm.image_size(args.model)
    x, y = _data(image)
    out = {"framework": args.worker, "model": args.model}
    t0 = time.perf_counter()
    try:
        if args.worker == "ours":
            fn = _ours(args.onnx, args.mode, x, y, not args.no_weight_copies)
        elif args.worker == "ort":
            sess = _ort(args.onnx, args.threads)
            fn = lambda: sess.run(None, {"input": x})  # noqa: E731
        else:
            fn = _torch(args.model, args.mode, x, y, args.threads)
        first = fn()
    except Exception as e:  # reported in the table, not a crash of the bench
        msg = str(e).strip().splitlines()
        out["error"] = f"{type(e).__name__}: {msg[0] if msg else ''}"[:160]
        return out, None
    out["first_s"] = time.perf_counter() - t0
    if args.mode == "train":
        out["first_loss"] = _scalar(first)
    alternate.time_calls(fn, 0, args.warmup)
    if hasattr(fn, "model"):  # the weight copies its plan holds beside the parameters
        report = fn.model.plan_for(x).memory_report()
        out["copies_mib"] = report["folded_bytes"] / 2 ** 20
    if args.check and args.worker == "ours":
        mine = np.asarray(getattr(fn(), "data", None))
        ref = _ort(args.onnx, args.threads).run(None, {"input": x})[0]
        out["rel_err"] = float(np.abs(mine - ref).max() / max(np.abs(ref).max(), 1e-30))
    return out, fn


# ---------------------------------------------------------------------- driver
def _start(fw, name, mode, path, args, check=False):
    argv = ["--worker", fw, "--model", name, "--mode", mode, "--onnx", path,
            "--threads", str(args.threads), "--warmup", str(args.warmup)]
    if args.no_weight_copies:
        argv.append("--no-weight-copies")
    if check:
        argv.append("--check")
    return alternate.Worker(__file__, argv, env={"NUMBA_NUM_THREADS": str(args.threads)})


def _bench(names, mode, fws, paths, args, bar, row):
    """Time ``fws`` on each model in interleaved bursts; ``row(name, path, {fw: [runs]})``
    prints the model's row as soon as it is measured and returns its ratio (or None). A
    worker that failed stops that framework for that model. Returns the ratios."""
    ratios = []
    calls = args.steps if mode == "infer" else args.train_steps
    for name in names:
        runs = {}
        if not isinstance(paths[name], Exception):
            def start(fw, r, name=name):
                return _start(fw, name, mode, paths[name], args,
                              check=(r == 0 and mode == "infer"))
            bar.set_postfix_str(f"{mode} {name}")
            runs = alternate.interleave(fws, args.rounds, start, args.bursts, calls,
                                        pause=args.pause, progress=bar.update)
        else:
            bar.update(args.rounds * len(fws))
        ratio = row(name, paths[name], runs)
        if ratio is not None and np.isfinite(ratio):
            ratios.append(ratio)
    return ratios


def _cell(runs):
    ok = [r for r in runs if "error" not in r]
    return alternate.median_ms(ok) if ok else float("nan")


def _error(runs):
    return next((r["error"] for r in runs if "error" in r), None)


def _failures(runs, fws):
    return "; ".join(f"{fw} failed: {_error(runs[fw])}" for fw in fws
                     if _error(runs.get(fw, [])))


INFER_HEADER = (f"{'model':<20}{'ours ms':>9}{'ORT ms':>9}{'torch ms':>9}{'ours/ORT':>10}"
                f"{'ours/torch':>11}{'rel err':>10}{'copies MiB':>11}  note")


def infer_row(name, path, runs):
    """Print one inference row; the ours/ORT ratio where ours imported and matched."""
    if isinstance(path, Exception):
        print(f"{name:<20}{'':>58}  export failed: {path}", flush=True)
        return None
    ms = {fw: _cell(runs.get(fw, [])) for fw in INFER_FWS}
    ours = runs.get("ours", [])
    err = ours[0].get("rel_err") if ours else None
    copies = ours[0].get("copies_mib") if ours else None
    ratio = alternate.paired_ratio(ours, runs.get("ort", []))
    vs_torch = alternate.paired_ratio(ours, runs.get("torch", []))
    if _error(ours):
        note, ratio = f"import failed: {_error(ours)}", None
    elif err is not None and not err <= MATCH_TOL:
        note, ratio = f"MISMATCH vs ORT (> {MATCH_TOL:g})", None
    else:
        note = _failures(runs, ("ort", "torch"))
    print(f"{name:<20}{ms['ours']:>9.2f}{ms['ort']:>9.2f}{ms['torch']:>9.2f}"
          f"{ratio if ratio is not None else float('nan'):>10.2f}{vs_torch:>11.2f}"
          f"{'-' if err is None else format(err, '.1e'):>10}"
          f"{'-' if copies is None else format(copies, '.1f'):>11}  {note}", flush=True)
    return ratio


TRAIN_HEADER = (f"{'model (train step)':<20}{'ours ms':>9}{'torch ms':>9}{'ours/torch':>11}"
                f"{'1st loss ours':>15}{'torch':>10}  note")


def train_row(name, path, runs):
    """Print one training row; the ours/torch ratio."""
    if isinstance(path, Exception):
        print(f"{name:<20}{'':>54}  export failed: {path}", flush=True)
        return None
    ms = {fw: _cell(runs.get(fw, [])) for fw in TRAIN_FWS}
    loss = {fw: (runs.get(fw) or [{}])[0].get("first_loss", float("nan")) for fw in TRAIN_FWS}
    ratio = alternate.paired_ratio(runs.get("ours", []), runs.get("torch", []))
    print(f"{name:<20}{ms['ours']:>9.2f}{ms['torch']:>9.2f}{ratio:>11.2f}"
          f"{loss['ours']:>15.5f}{loss['torch']:>10.5f}  {_failures(runs, TRAIN_FWS)}",
          flush=True)
    return ratio


def _verdict(value, target):
    return f"{value:.2f} (target <= {target}: {'met' if value <= target else 'MISSED'})"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(tvm.MODELS),
                    help="comma-separated subset of " + ",".join(tvm.MODELS))
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds, each with a fresh process per framework")
    ap.add_argument("--bursts", type=int, default=8,
                    help="bursts per framework and round, the frameworks taking turns")
    ap.add_argument("--steps", type=int, default=10, help="timed inference calls per burst")
    ap.add_argument("--train-steps", type=int, default=3, help="timed training steps per burst")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls after the first")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads of every framework (default: all cores)")
    ap.add_argument("--pause", type=float, default=0.1,
                    help="seconds of sleep before each process starts and each burst")
    ap.add_argument("--no-train", action="store_true", help="inference only")
    ap.add_argument("--no-weight-copies", action="store_true",
                    help="run ours with model.weight_copies = False: no plan-owned weight "
                         "copies in other layouts (less memory, slower)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 1 round, 5 inference calls and 2 training steps")
    ap.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(),
                                                        "singa_graph_bench_onnx"),
                    help="where the exported .onnx files are kept between runs")
    ap.add_argument("--worker", choices=INFER_FWS, help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("infer", "train"), help=argparse.SUPPRESS)
    ap.add_argument("--onnx", help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        ready, fn = worker(args)
        alternate.serve(fn, ready)
        return
    if args.quick:
        args.rounds, args.bursts, args.steps, args.train_steps, args.warmup = 1, 2, 3, 1, 1
    names = [n.strip().lower() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in tvm.MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; choose from {list(tvm.MODELS)}")
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the bench extra
        tqdm = None
    import numba
    import onnxruntime
    import torch

    tv = tvm.import_torchvision()
    print(f"{time.strftime('%Y-%m-%d')}; python {sys.version.split()[0]}, numpy "
          f"{np.__version__}, numba {numba.__version__}, onnxruntime {onnxruntime.__version__},"
          f" torch {torch.__version__}, torchvision {tv.__version__}; {os.cpu_count()} cpus, "
          f"{args.threads} threads per framework; batch {BATCH}; {args.rounds} round(s) of a "
          f"process per framework, each timed in {args.bursts} bursts taking turns; ms: median"
          f" per call; ratios: median over the bursts of paired burst medians")
    t0 = time.perf_counter()
    train_names = [] if args.no_train else [n for n in names if n in TRAIN_MODELS]
    paths = {"infer": {}, "train": {}}
    todo = [("infer", n) for n in names] + [("train", n) for n in train_names]
    for mode, name in (tqdm(todo, desc="export", file=sys.stderr) if tqdm else todo):
        try:
            paths[mode][name] = tvm.cached_export(name, args.cache_dir,
                                                  keep_batchnorm=(mode == "train"))
        except Exception as e:
            paths[mode][name] = RuntimeError(f"{type(e).__name__}: {e}"[:160])
    total = args.rounds * (len(names) * len(INFER_FWS) + len(train_names) * len(TRAIN_FWS))
    bar = tqdm(total=total, desc="timing", file=sys.stderr) if tqdm else _NoBar()
    print("\n" + INFER_HEADER, flush=True)
    ratios = _bench(names, "infer", INFER_FWS, paths["infer"], args, bar, infer_row)
    if ratios:
        print(f"ours/ORT over {len(ratios)} models: median "
              f"{_verdict(float(np.median(ratios)), TARGET_MEDIAN)}, worst "
              f"{_verdict(max(ratios), TARGET_WORST)}", flush=True)
    if train_names:
        print("\n" + TRAIN_HEADER, flush=True)
        tr = _bench(train_names, "train", TRAIN_FWS, paths["train"], args, bar, train_row)
        if tr:
            print(f"training step ours/torch: worst {_verdict(max(tr), TARGET_TRAIN)}")
    bar.close()
    print(f"total time {time.perf_counter() - t0:.0f} s")


class _NoBar:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        print(f"  {s} ...", file=sys.stderr)

    def close(self):
        pass


if __name__ == "__main__":
    main()
