"""Slowdown on a busy machine: each framework quiet, then with one core taken by a busy loop.

Two workloads, each framework alone in its own process and on the same thread count
(``--threads``, all cores by default):

    cnn         the CNN training step of bench/step_time.py (zoo.CNN(bn=False,
                branches=False), batch 64, 1x28x28, SGD momentum): singa_graph graph mode
                and PyTorch eager
    squeezenet  torchvision squeezenet1_1 inference, random weights, exported by
                torch.onnx.export (opset 17, symbolic batch), batch 2 at 3x64x64:
                singa_graph (singa_graph.onnx.load, graph mode), onnxruntime and PyTorch
                eager

"Busy" starts one spinning process (``while True: pass``, not pinned) before the worker
and stops it after, so the worker competes with it for one of the cores. Quiet and busy
runs alternate for ``--rounds`` rounds; every figure is the median over all timed
iterations of all rounds. The slowdown is busy / quiet; the last column is our slowdown
over the other framework's, the target being <= 1.5 against onnxruntime and PyTorch.

Workers inherit the environment, so the thread policy under test can be changed from the
command line (e.g. ``GOMP_SPINCOUNT=1000 python bench/contention.py`` for a short spin,
or ``OMP_WAIT_POLICY=passive``; see singa_graph/runtime/threads.py). Numbers taken while other work runs
on the machine are not comparable.

    python bench/contention.py [--workloads cnn,squeezenet] [--rounds 3] [--iters 30]
                               [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FRAMEWORKS = {"cnn": ("singa_graph", "torch"),
              "squeezenet": ("singa_graph", "onnxruntime", "torch")}
SQUEEZE_INPUT = (2, 3, 64, 64)
TARGET = 1.5


# ---------------------------------------------------------------------- workers
def _squeezenet(path: str):
    import torch

    sys.path.insert(0, HERE)
    from torchvision_models import import_torchvision

    torchvision = import_torchvision()

    torch.manual_seed(0)
    model = torchvision.models.squeezenet1_1(weights=None).eval()
    if path and not os.path.exists(path):
        torch.onnx.export(model, torch.zeros(SQUEEZE_INPUT), path, opset_version=17,
                          input_names=["x"], output_names=["y"], dynamo=False,
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return model


def _timer(fw: str, workload: str, onnx_path: str, threads: int):
    """A zero-argument callable running one iteration of ``workload`` on ``fw``."""
    if workload == "cnn":
        sys.path.insert(0, HERE)
        import step_time

        if fw == "torch":
            import torch

            import torch_models as tm

            torch.set_num_threads(threads)
            x, y = step_time._data("cnn")
            r = tm.TorchRunner("cnn", step_time.MODELS["cnn"][1], x, y)
            return r.step
        m = step_time._singa_model("cnn", graph=True)
        x, y = step_time._data("cnn")
        return lambda: m(x, y)
    x = np.random.default_rng(0).standard_normal(SQUEEZE_INPUT).astype(np.float32)
    if fw == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
        return lambda: sess.run(None, {"x": x})
    if fw == "torch":
        import torch

        torch.set_num_threads(threads)
        model, tx = _squeezenet(""), torch.from_numpy(x)

        def run():
            with torch.inference_mode():
                return model(tx)
        return run
    import singa_graph.onnx as sonnx

    m = sonnx.load(onnx_path)
    m.compile([x], is_train=False, use_graph=True)
    return lambda: m(x)


def worker(args) -> None:
    if args.fw == "singa_graph":
        from singa_graph import set_num_threads

        set_num_threads(args.threads)
    run = _timer(args.fw, args.workload, args.onnx, args.threads)
    for _ in range(args.warmup):
        run()
    times = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"times": times}))


# ---------------------------------------------------------------------- driver
def _spawn(fw: str, workload: str, args, busy: bool) -> list:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--fw", fw,
           "--workload", workload, "--onnx", args.onnx, "--iters", str(args.iters),
           "--warmup", str(args.warmup), "--threads", str(args.threads)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        time.sleep(0.2 if busy else 0.0)
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.limit)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    if res.returncode:
        raise RuntimeError(f"worker {fw}/{workload} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])["times"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="cnn,squeezenet")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=30, help="timed iterations per process")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="threads per framework (0: cores)")
    p.add_argument("--limit", type=int, default=600, help="seconds per worker")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--fw", help=argparse.SUPPRESS)
    p.add_argument("--workload", help=argparse.SUPPRESS)
    p.add_argument("--onnx", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.threads = args.threads or len(os.sched_getaffinity(0))
    if args.worker:
        return worker(args)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    tmp = tempfile.TemporaryDirectory()
    args.onnx = os.path.join(tmp.name, "squeezenet1_1.onnx")
    if "squeezenet" in workloads:
        _squeezenet(args.onnx)
    policy = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                          "SINGA_GRAPH_NUM_THREADS") if k in os.environ}
    print(f"{len(os.sched_getaffinity(0))} cores, {args.threads} threads per framework; "
          f"{args.rounds} rounds x {args.iters} timed iterations, quiet and busy alternating; "
          f"environment {policy or '(defaults)'}; median ms")
    print(f"{'workload':<12}{'framework':<13}{'quiet':>9}{'busy':>9}{'slowdown':>10}"
          f"{'ours / theirs':>15}")
    for w in workloads:
        runs = {(fw, b): [] for fw in FRAMEWORKS[w] for b in (False, True)}
        for _ in range(args.rounds):
            for fw in FRAMEWORKS[w]:
                for busy in (False, True):
                    runs[(fw, busy)] += _spawn(fw, w, args, busy)
        med = {k: float(np.median(v)) * 1e3 for k, v in runs.items()}
        slow = {fw: med[(fw, True)] / med[(fw, False)] for fw in FRAMEWORKS[w]}
        for fw in FRAMEWORKS[w]:
            rel = "" if fw == "singa_graph" else \
                f"{slow['singa_graph'] / slow[fw]:>10.2f}" + \
                ("  ok" if slow["singa_graph"] / slow[fw] <= TARGET else "  MISS")
            print(f"{w:<12}{fw:<13}{med[(fw, False)]:>9.2f}{med[(fw, True)]:>9.2f}"
                  f"{slow[fw]:>9.2f}x{rel}", flush=True)
    print(f"target: our slowdown <= {TARGET}x that of onnxruntime / PyTorch")
    tmp.cleanup()


if __name__ == "__main__":
    main()
