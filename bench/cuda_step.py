"""Training-step time, launch overhead and memory of singa_graph on an NVIDIA GPU against
PyTorch CUDA, on the models of bench/step_time.py (ResNet at batch 128: the target model).

    python bench/cuda_step.py [--models mlp,cnn,resnet] [--rounds 3] [--steps 30]

How it is measured. Every framework runs alone in its own process (``--worker``), the
processes alternate (singa_graph, torch, singa_graph, torch, ...) for ``--rounds`` rounds,
and each warms up before timing ``--steps`` steps. A step is the wall-clock time of one
training step *including the wait for the GPU*: singa_graph's ``model(x, y)`` returns the
output and loss on the host (its plan ends by copying them out, which waits for every
kernel); torch's step is ``zero_grad(set_to_none=True)``, forward, cross-entropy, backward,
``opt.step()`` and ``loss.item()`` (which waits likewise). Both read their batch from
device memory (a singa_graph Tensor on the GPU; a torch CUDA tensor). Figures are medians
over every timed step of every round.

* launches/step: kernel launches in one singa_graph step (numba kernels and cuBLAS calls,
  counted by wrapping both once), and us/launch: the host time of one launch of an empty
  numba kernel (median of 2000). Their product is the launch overhead a step pays on the
  host; when it exceeds the GPU time of the kernels, the step is launch-bound.
* memory (MiB = 2**20 bytes): singa_graph ``arena`` (every transient buffer and all kernel
  workspace of the step) and ``plan`` (``memory_report()['plan_bytes']``: the arena plus
  the persistent buffers the plan created); torch ``step peak``: ``max_memory_allocated``
  during one step minus ``memory_allocated`` before it (activations, gradients, cuBLAS/cuDNN
  workspace from its caching allocator), and ``max alloc`` its total peak.

Needs a GPU with numba-cuda and CuPy (``pip install 'singa_graph[cuda]'``) and torch with
CUDA. Under the CUDA simulator (``--simulate``) it runs tiny steps to check itself only.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

MIB = float(1 << 20)
LR, MOMENTUM = 0.01, 0.9
# name -> (zoo class, kwargs, input shape, description)
MODELS = {
    "mlp": ("MLP", {}, (64, 784), "MLP 784-256-256-10, batch 64"),
    "cnn": ("CNN", {"bn": False, "branches": False}, (64, 1, 28, 28),
            "CNN 2x(conv+relu+pool)+fc, batch 64, 1x28x28"),
    "resnet": ("ResNet", {"widths": (16, 32, 64), "blocks": 1}, (128, 3, 32, 32),
               "ResNet 16/32/64 x1 block (BN), batch 128, 3x32x32"),
}
# --simulate: models and batches small enough for the simulator (a self-check of the script)
TINY = {"mlp": ({"hidden": (16,)}, (4, 12)),
        "cnn": ({"bn": False, "branches": False, "channels": (2, 3)}, (2, 1, 8, 8)),
        "resnet": ({"widths": (2, 4), "blocks": 1}, (2, 3, 8, 8))}


def _data(shape):
    rng = np.random.default_rng(0)
    return (rng.standard_normal(shape).astype(np.float32),
            rng.integers(0, 10, shape[0]).astype(np.int32))


def _singa(name, shape, dev, kw=None):
    from singa_graph import opt, random, tensor, zoo

    cls = MODELS[name][0]
    kw = MODELS[name][1] if kw is None else kw
    random.seed(0)
    m = getattr(zoo, cls)(**kw)
    m.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM))
    x, y = _data(shape)
    tx, ty = tensor.from_numpy(x, dev), tensor.from_numpy(y, dev)
    m.compile([tx], is_train=True, use_graph=True, schedule="memory")
    return m, tx, ty


def _count_launches(run_step) -> int:
    """Kernel launches (numba kernels and cuBLAS GEMMs) in one call of ``run_step``."""
    from singa_graph.runtime.gpu import simulated
    from singa_graph.runtime.kernels.cuda import blas

    sim = simulated()
    if sim:
        from numba.cuda.simulator import kernel as simk
        kernel_class, attr = simk.FakeCUDAKernel, "__call__"
    else:
        from numba.cuda.dispatcher import CUDADispatcher as kernel_class
        attr = "call"  # what every configured launch kern[grid, block](...) goes through
    count = [0]
    real_call = getattr(kernel_class, attr)

    def call(self, *a, **k):
        # the simulator calls device functions through the same class: count launches only
        if not sim or not (self._device or simk._kernel_context):
            count[0] += 1
        return real_call(self, *a, **k)

    setattr(kernel_class, attr, call)
    cp = blas._load_cupy()
    real_gemm = real_matmul = None
    if cp is not None:
        real_gemm, real_matmul = cp.cublas.gemm, cp.matmul

        def gemm(*a, **k):
            count[0] += 1
            return real_gemm(*a, **k)

        def matmul(*a, **k):
            count[0] += 1
            return real_matmul(*a, **k)
        cp.cublas.gemm, cp.matmul = gemm, matmul
    try:
        run_step()
    finally:
        setattr(kernel_class, attr, real_call)
        if cp is not None:
            cp.cublas.gemm, cp.matmul = real_gemm, real_matmul
    return count[0]


def _launch_us(repeat: int = 2000) -> float:
    from numba import cuda

    @cuda.jit
    def empty(x):
        pass

    a = cuda.device_array(1, np.float32)
    k = empty[1, 32]
    k(a)
    cuda.synchronize()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        k(a)
        times.append(time.perf_counter() - t0)
    cuda.synchronize()
    return float(np.median(times) * 1e6)


def worker(fw, name, steps, warmup, simulate, profile=0) -> dict:
    kw, shape = TINY[name] if simulate else MODELS[name][1:3]
    out = {"framework": fw, "model": name}
    if fw == "torch":
        import torch

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import torch_models as tm

        from singa_graph import device as sg_device

        dev = torch.device("cuda")
        x, y = _data(shape)
        model = tm.torch_model(name, kw, shape).to(dev)
        sg_model, _, _ = _singa(name, shape, sg_device.get_default_device(), kw)
        tm.copy_params_to_torch(sg_model, model)
        sgd = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        tx = torch.from_numpy(x).to(dev)
        ty = torch.from_numpy(y.astype(np.int64)).to(dev)

        def step():
            sgd.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(tx), ty)
            loss.backward()
            sgd.step()
            return loss.item()
        out["gpu"] = torch.cuda.get_device_name()
        out["first_loss"] = step()  # the same weights and batch as singa_graph's first step
        for _ in range(max(0, warmup - 1)):
            step()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        out["memory"] = {"step_peak": torch.cuda.max_memory_allocated() - before,
                         "max_alloc": torch.cuda.max_memory_allocated()}
    else:
        from singa_graph import device as sg_device

        dev = sg_device.create_cuda_gpu()
        m, tx, ty = _singa(name, shape, dev, kw)

        def step():
            return m(tx, ty)[1].to_numpy().item()
        out["gpu"] = dev.name
        out["first_loss"] = step()
        for _ in range(max(0, warmup - 1)):
            step()
        r = m.memory_report()
        out["memory"] = {"arena": r["arena_bytes"], "plan": r["plan_bytes"],
                         "staging": r["host_staging_bytes"]}
        out["launches"] = _count_launches(step)
        out["plan_steps"] = len(m.last_plan.steps)
        out["launch_us"] = _launch_us(20 if simulate else 2000)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    out["times"] = times
    if profile and fw == "singa":
        # after the timing: profiling synchronises after every step
        out["profile"] = m.profile(tx, ty, repeat=5).table(top=profile)
    return out


def _spawn(fw, name, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", fw, "--model", name,
           "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--profile", str(args.profile)]
    if args.simulate:
        cmd.append("--simulate")
    env = dict(os.environ)
    if args.simulate:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode:
        raise RuntimeError(f"worker {fw}/{name} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--simulate", action="store_true",
                    help="tiny shapes on the CUDA simulator, singa_graph only (a self-check)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also print singa_graph's per-op-type times and its N slowest nodes "
                         "(each step followed by a device synchronisation)")
    ap.add_argument("--worker", choices=("singa", "torch"), help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.model, args.steps, args.warmup,
                                args.simulate, args.profile)))
        return
    frameworks = ("singa",) if args.simulate else ("singa", "torch")
    print(f"{time.strftime('%Y-%m-%d')}; median wall-clock ms per training step, each "
          f"framework alone in its own process, {args.rounds} alternating rounds")
    for name in [n.strip() for n in args.models.split(",") if n.strip()]:
        runs = {fw: [] for fw in frameworks}
        for _ in range(args.rounds):
            for fw in frameworks:
                runs[fw].append(_spawn(fw, name, args))
        med = {fw: float(np.median(np.concatenate([r["times"] for r in rs])) * 1e3)
               for fw, rs in runs.items()}
        s = runs["singa"][0]
        what = f"{name} (tiny, {TINY[name][1]})" if args.simulate else MODELS[name][3]
        print(f"\n== {what} on {s['gpu']}")
        over = s["launches"] * s["launch_us"] / 1e3
        print(f"  singa_graph  {med['singa']:8.2f} ms   {s['launches']} launches/step "
              f"({s['plan_steps']} plan steps) x {s['launch_us']:.1f} us = {over:.2f} ms of "
              f"launch overhead; arena {s['memory']['arena'] / MIB:.2f} MiB, plan "
              f"{s['memory']['plan'] / MIB:.2f} MiB")
        if "torch" in runs:
            t = runs["torch"][0]
            print(f"  torch CUDA   {med['torch']:8.2f} ms   step peak "
                  f"{t['memory']['step_peak'] / MIB:.2f} MiB, max alloc "
                  f"{t['memory']['max_alloc'] / MIB:.2f} MiB")
            print(f"  ratios: time singa/torch = {med['singa'] / med['torch']:.2f}; arena / "
                  f"torch step peak = {s['memory']['arena'] / t['memory']['step_peak']:.2f}")
            print(f"  first-step loss: singa {s['first_loss']:.6f}, torch "
                  f"{t['first_loss']:.6f}")
        if s.get("profile"):
            print("  singa_graph profile (first round):\n    " +
                  s["profile"].replace("\n", "\n    "))


if __name__ == "__main__":
    main()
