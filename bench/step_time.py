"""Training-step time and memory of singa_graph against PyTorch eager on the CPU.

Four models, each a full training step (forward, softmax cross-entropy, backward, SGD with
momentum 0.9 on every parameter):

    MLP     784-256-256-10, batch 64                        (zoo.MLP)
    CNN     2x(conv3x3+relu+maxpool2) + linear, batch 64, 1x28x28
                                                            (zoo.CNN(bn=False, branches=False))
    ResNet  stem + 3 stages of 1 basic block (16/32/64 channels, BN), GAP + linear,
            batch 32, 3x32x32                              (zoo.ResNet(widths=(16, 32, 64)))
    GPT     4 pre-norm causal transformer blocks, d=128, 4 heads, seq 64, batch 16, a
            10-class read-out per position                 (bench/gpt_models.py)

Frameworks: singa_graph graph mode (the step compiled into one plan, schedule 'memory'),
singa_graph eager mode (the same code run op by op) and PyTorch eager with the same
architecture (bench/torch_models.py: same sizes, padding, pooling, biases, BatchNorm
momentum/eps, SGD momentum, mean cross-entropy), started from the same initial weights.

How it is measured. Every framework runs alone in its own process: a fresh
``python bench/step_time.py --worker FRAMEWORK --model NAME``, so no thread pool of one
framework idles on the cores of another. The processes alternate (graph, eager, torch,
graph, eager, torch, ...) for ``--rounds`` rounds (3 by default), so a change in machine
load hits all of them alike. Each process warms up (graph mode: trace, compile and a few
steps), then times ``--steps`` steps; a step is the wall-clock time of one ``model(x, y)``
call (torch: ``zero_grad(set_to_none=True)``, forward, loss, backward, ``step()``). The
figure is the MEDIAN over all timed steps of all rounds, with the spread of the per-round
medians next to it. PyTorch gets as many intra-op threads as Numba has. ``cpu ms`` is the
median process CPU time of a step (all threads): on a shared machine it moves less with the
load than wall-clock time, but it counts the time threads spin waiting for each other, so
it compares work best with one thread (``NUMBA_NUM_THREADS=1``).

Memory (MiB = 2**20 bytes):

* singa_graph graph, ``transient``: the plan's arena, the one block holding every transient
  buffer of the step (activations, gradients, temporaries) and every kernel's workspace.
  ``plan total``: what exists because the plan was built, from ``memory_report()``:
  the arena plus the persistent buffers the plan created (input and output buffers,
  optimizer state made while tracing). A tracemalloc test holds every plan to that figure
  (tests/runtime/test_plan_owns_memory.py). ``persistent``: parameters, optimizer state, BN
  running stats, inputs and outputs.
* torch, ``transient``: the peak, during one training step, of the bytes the CPU allocator
  handed out since the step began (running sum of allocations and frees recorded by
  ``torch.profiler`` with ``profile_memory=True``); gradients are freed before the step, so
  this covers activations saved for backward, gradients, workspace and temporaries, the
  same content as the singa_graph arena. ``persistent``: parameters, momentum buffers, BN
  stats and the batch.
* singa_graph eager: not measured (numpy allocates per op).

    python bench/step_time.py [--models mlp,cnn,resnet,gpt] [--rounds 3] [--steps N]
                              [--profile]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import alternate

MIB = float(1 << 20)
LR, MOMENTUM = 0.01, 0.9
FRAMEWORKS = ("graph", "eager", "torch")
LABEL = {"graph": "singa_graph graph", "eager": "singa_graph eager", "torch": "torch eager"}

# name -> (zoo class name, kwargs, input shape, default steps per round, description)
MODELS = {
    "mlp": ("MLP", {}, (64, 784), 100, "MLP 784-256-256-10, batch 64"),
    "cnn": ("CNN", {"bn": False, "branches": False}, (64, 1, 28, 28), 30,
            "CNN 2x(conv+relu+pool)+fc, batch 64, 1x28x28"),
    "resnet": ("ResNet", {"widths": (16, 32, 64), "blocks": 1}, (32, 3, 32, 32), 20,
               "ResNet 16/32/64 x1 block (BN), batch 32, 3x32x32"),
    # bench/gpt_models.py: embeddings in, a 10-class read-out at every position
    "gpt": ("GPT", {"blocks": 4, "d": 128, "heads": 4}, (16, 64, 128), 10,
            "GPT 4 pre-norm causal blocks, d=128, 4 heads, seq 64, batch 16"),
}


# ---------------------------------------------------------------------- worker processes
def _singa_model(name, graph: bool):
    from singa_graph import opt, random, zoo

    cls, kw, shape = MODELS[name][:3]
    random.seed(0)
    if name == "gpt":
        import gpt_models

        m = gpt_models.singa_gpt(**kw)
    else:
        m = getattr(zoo, cls)(**kw)
    m.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM))
    m.compile([np.zeros(shape, np.float32)], is_train=True, use_graph=graph,
              schedule="memory")
    return m


def _data(name):
    shape = MODELS[name][2]
    rng = np.random.default_rng(0)
    labels = shape[0] * shape[1] if name == "gpt" else shape[0]  # gpt: one per position
    return (rng.standard_normal(shape).astype(np.float32),
            rng.integers(0, 10, labels).astype(np.int32))


def worker(fw: str, name: str, steps: int, warmup: int, memory: bool, profile: bool) -> dict:
    """Build, warm up and time one framework on one model; a JSON-able result."""
    x, y = _data(name)
    out = {"framework": fw, "model": name}
    if fw == "torch":
        import numba
        import torch

        import torch_models as tm

        torch.set_num_threads(numba.get_num_threads())
        if name == "gpt":
            import gpt_models

            r = gpt_models.TorchGPTRunner(MODELS[name][1], x, y)
            gpt_models.copy_params(_singa_model(name, graph=False), r.model)
        else:
            r = tm.TorchRunner(name, MODELS[name][1], x, y)
            tm.copy_params_to_torch(_singa_model(name, graph=False), r.model)
        step = r.step
        loss = lambda: float(r.step().item())  # noqa: E731
        out["threads"] = torch.get_num_threads()
    else:
        m = _singa_model(name, graph=(fw == "graph"))
        step = lambda: m(x, y)  # noqa: E731
        loss = lambda: np.asarray(m(x, y)[1].data).item()  # noqa: E731
    t0 = time.perf_counter()
    out["first_loss"] = loss()
    out["first_step_s"] = time.perf_counter() - t0
    cpu = []

    def timed():  # the process's CPU time too (all its threads; see the module docstring)
        c0 = time.process_time()
        step()
        cpu.append(time.process_time() - c0)
    out["times"] = alternate.time_calls(timed, steps, max(0, warmup - 1))
    out["cpu"] = cpu[-steps:]
    if memory and fw == "torch":
        peak, how = r.step_peak_bytes()
        out["memory"] = {"transient": peak, "persistent": r.persistent_bytes(), "how": how}
    elif memory and fw == "graph":
        rep = m.memory_report()
        out["memory"] = {"transient": rep["arena_bytes"], "persistent": rep["persistent_bytes"],
                         "plan": rep["plan_bytes"], "workspace": rep["workspace_peak_bytes"],
                         "how": "plan"}
    if profile and fw == "graph":
        out["profile"] = m.profile(x, y, repeat=5).table(top=10)
    return out


def _spawn(fw, name, args, memory) -> dict:
    argv = ["--worker", fw, "--model", name, "--steps", str(args.steps or MODELS[name][3]),
            "--warmup", str(args.warmup)]
    if memory:
        argv.append("--memory")
    if args.profile:
        argv.append("--profile")
    return alternate.spawn(__file__, argv)


# ---------------------------------------------------------------------- driver
def bench_model(name, args, frameworks) -> dict:
    desc = MODELS[name][4]
    print(f"\n== {desc}: {args.rounds} rounds x {args.steps or MODELS[name][3]} timed steps "
          f"per framework, each framework alone in its own process, alternating")
    results = alternate.alternate(
        frameworks, args.rounds, lambda fw, r: _spawn(fw, name, args, memory=(r == 0)),
        pause=args.pause)
    print(f"  {'framework':<19}{'median ms':>10}{'cpu ms':>8}{'round medians':>24}"
          f"{'1st step ms':>13}"
          f"{'transient':>11}{'plan total':>11}{'persist':>9}  memory source")
    med, cpu = {}, {}
    for fw, runs in results.items():
        med[fw] = alternate.median_ms(runs)
        cpu[fw] = alternate.median_ms(runs, "cpu")
        rounds = " ".join(f"{np.median(o['times']) * 1e3:.1f}" for o in runs)
        mem = runs[0].get("memory", {})
        how = {"plan": "memory_report(): arena (workspace incl.) / arena + plan-created "
                       "persistent / persistent",
               "profiler": "torch.profiler: peak bytes allocated during the step / "
                           "params+momentum+BN stats+batch",
               "profiler-ops": "torch.profiler per-op totals (approx. order): step peak / "
                               "params+momentum+BN stats+batch",
               "estimate": "ESTIMATE: saved-for-backward + grads"}.get(mem.get("how"),
                                                                     "not measured")
        print(f"  {LABEL[fw]:<19}{med[fw]:>10.2f}{cpu[fw]:>8.1f}{rounds:>24}"
              f"{runs[0]['first_step_s'] * 1e3:>13.1f}{_mib(mem.get('transient'))}"
              f"{_mib(mem.get('plan'))}{_mib(mem.get('persistent'), 9)}  {how}")
    if "torch" in med:
        g, t = med["graph"], med["torch"]
        tr = results["torch"][0]["memory"]["transient"]
        gm = results["graph"][0]["memory"]
        print(f"  ratios: graph / torch = {g / t:.2f}, eager / torch = {med['eager'] / t:.2f}, "
              f"graph / torch CPU time = {cpu['graph'] / cpu['torch']:.2f}; "
              f"transient (arena) / torch step peak = {gm['transient'] / tr:.2f}; "
              f"plan total / torch step peak = {gm['plan'] / tr:.2f}")
    print("  first-step loss (same initial weights): " + ", ".join(
        f"{LABEL[fw]} {runs[0]['first_loss']:.6f}" for fw, runs in results.items()))
    if args.profile:
        print("\n  singa_graph graph-mode profile (plan.profile, repeat=5):")
        print("    " + results["graph"][0]["profile"].replace("\n", "\n    "))
    return med


def _mib(b, width=11):
    return f"{b / MIB:{width}.2f}" if b is not None else f"{'-':>{width}}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--steps", type=int, default=0,
                    help="timed steps per process (default: " + ", ".join(
                        f"{k} {v[3]}" for k, v in MODELS.items()) + ")")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (at least 3)")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed steps first in each process (the first one compiles)")
    ap.add_argument("--pause", type=float, default=0.5,
                    help="seconds of sleep before each process starts")
    ap.add_argument("--profile", action="store_true", help="print the graph-mode op profile")
    ap.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.model, args.steps, args.warmup,
                                args.memory, args.profile)))
        return
    names = [n.strip().lower() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    if args.rounds < 3:
        ap.error("--rounds must be at least 3 (medians of alternating rounds)")
    try:
        import torch  # noqa: F401

        frameworks = FRAMEWORKS
    except ImportError as e:
        frameworks = FRAMEWORKS[:2]
        print(f"torch is not importable ({e}); printing singa_graph columns only")
    import numba

    print(f"{time.strftime('%Y-%m-%d')}; python {sys.version.split()[0]}, numpy "
          f"{np.__version__}, numba {numba.__version__}; {os.cpu_count()} cpus, numba threads "
          f"{numba.get_num_threads()}; median wall-clock ms per training step")
    t0 = time.perf_counter()
    summary = {n: bench_model(n, args, frameworks) for n in names}
    print("\nsummary (median ms/step)")
    print(f"  {'model':<8}" + "".join(f"{fw:>10}" for fw in frameworks)
          + (f"{'graph/torch':>13}" if "torch" in frameworks else ""))
    for n, med in summary.items():
        row = f"  {n:<8}" + "".join(f"{med[fw]:>10.2f}" for fw in frameworks)
        if "torch" in med:
            row += f"{med['graph'] / med['torch']:>13.2f}"
        print(row)
    print(f"total time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
