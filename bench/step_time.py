"""Training-step time of singa_graph (graph and eager mode) against PyTorch eager on CPU.

Three models, each a full training step (forward, softmax cross-entropy, backward, SGD with
momentum 0.9 on every parameter):

    MLP     784-256-256-10, batch 64                        (zoo.MLP)
    CNN     2x(conv3x3+relu+maxpool2) + linear, batch 64, 1x28x28
                                                            (zoo.CNN(bn=False, branches=False))
    ResNet  stem + 3 stages of 1 basic block (16/32/64 channels, BN), GAP + linear,
            batch 32, 3x32x32                              (zoo.ResNet(widths=(16, 32, 64)))

Frameworks: singa_graph graph mode (the step compiled into one plan, schedule 'memory'),
singa_graph eager mode (the same code run op by op), and PyTorch eager with the same
architecture written here as torch.nn modules (same layer sizes, padding, pooling, biases,
BatchNorm momentum/eps, SGD momentum 0.9, mean cross-entropy). PyTorch gets as many intra-op
threads as Numba has (printed, with the OpenBLAS thread count when threadpoolctl is there).

Timing: each framework is warmed up first (graph mode: trace + compile + a few steps; the
"1st step" column is that first call), then the frameworks are timed in turns over a few
rounds, so that a change in machine load hits all of them alike. Before each turn the
process sleeps briefly and runs one untimed step, because the thread pools of the framework
that ran before (OpenBLAS, and the OpenMP runtimes of Numba and of torch) keep polling for a
while and would steal the cores of a small machine. The figure is the MEDIAN wall-clock time
of one ``model(x, y)`` call (torch: ``zero_grad(set_to_none=True)``, forward, loss,
backward, ``step()``), with the 25th-75th percentile range next to it. The same batch is fed
every step; Python's garbage collector stays on, as in real training. Thread settings come
from the environment as usual (OPENBLAS_NUM_THREADS, NUMBA_NUM_THREADS, OMP_* ...), and
singa_graph's times depend on them a lot on small machines: its BLAS calls (OpenBLAS's
pthread pool) and its Numba loops (an OpenMP pool) alternate within every conv, and each
pool keeps polling after its work is done.

Memory columns (all in MiB = 2**20 bytes):

* singa_graph graph, ``transient``: the plan's arena, the one block holding every transient
  buffer of the step (activations, gradients, temporaries) at its planned offsets.
  ``persistent``: parameters, optimizer state, BN running stats, inputs and fetched outputs.
* torch, ``transient``: the peak, during one training step, of the bytes of tensors allocated by
  the CPU allocator since the step began (running sum of the allocations and frees the
  profiler records with ``profile_memory=True``); gradients are freed before the step, so
  this covers activations saved for backward, gradients and temporaries, the same content
  as the singa_graph arena. The allocation events come from the profiler's event tree
  (exact order); where that private structure is missing, from the per-op memory totals of
  the public event list (labelled approximate); where neither works, an estimate is printed
  instead and labelled ESTIMATE: bytes saved for backward plus gradient bytes.
  ``persistent``: parameters, momentum buffers, BN running stats and the input batch.
* singa_graph eager: not measured (numpy allocates per op).

A sanity check is printed too: the singa_graph parameters are copied into the torch model
before the first step, and the first-step losses of the three frameworks must agree.

    python bench/step_time.py [--steps N] [--models mlp,cnn,resnet] [--profile]
                              [--rounds 3] [--pause 0.3] [--warmup 3]

Runs in about a minute on a 2-core machine with the defaults (60 steps per framework for
the CNN, 40 for the ResNet, 200 for the MLP); ``--steps`` sets one count for all models.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import numpy as np

import numba

from singa_graph import opt, random, zoo

try:
    import torch
    import torch.nn as tnn
    import torch.nn.functional as tF
except ImportError as e:  # pragma: no cover - depends on the environment
    torch = None
    _TORCH_ERROR = str(e)

MIB = float(1 << 20)
LR = 0.01
MOMENTUM = 0.9

# name -> (zoo class, kwargs, input shape, default steps, description)
MODELS = {
    "mlp": (zoo.MLP, {}, (64, 784), 200, "MLP 784-256-256-10, batch 64"),
    "cnn": (zoo.CNN, {"bn": False, "branches": False}, (64, 1, 28, 28), 60,
            "CNN 2x(conv+relu+pool)+fc, batch 64, 1x28x28"),
    "resnet": (zoo.ResNet, {"widths": (16, 32, 64), "blocks": 1}, (32, 3, 32, 32), 40,
               "ResNet 16/32/64 x1 block (BN), batch 32, 3x32x32"),
}


# ---------------------------------------------------------------------- torch models
if torch is not None:
    class TorchMLP(tnn.Module):
        def __init__(self, n_in=784, hidden=(256, 256), num_classes=10):
            super().__init__()
            sizes = (n_in,) + tuple(hidden)
            self.hidden = tnn.ModuleList(tnn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
            self.out = tnn.Linear(sizes[-1], num_classes)

        def forward(self, x):
            x = x.flatten(1)
            for lin in self.hidden:
                x = tF.relu(lin(x))
            return self.out(x)

    class TorchCNN(tnn.Module):
        """zoo.CNN(bn=False, branches=False): conv-relu-pool, conv-relu-pool, linear."""

        def __init__(self, in_ch=1, hw=28, channels=(16, 32), num_classes=10):
            super().__init__()
            c1, c2 = channels
            self.conv1 = tnn.Conv2d(in_ch, c1, 3, padding=1)
            self.conv2 = tnn.Conv2d(c1, c2, 3, padding=1)
            self.fc = tnn.Linear(c2 * (hw // 4) * (hw // 4), num_classes)

        def forward(self, x):
            y = tF.max_pool2d(tF.relu(self.conv1(x)), 2, 2)
            y = tF.max_pool2d(tF.relu(self.conv2(y)), 2, 2)
            return self.fc(y.flatten(1))

    def _bn(c):
        # singa_graph's momentum weights the new batch, as torch's does; same eps
        return tnn.BatchNorm2d(c, eps=1e-5, momentum=0.9)

    class TorchBasicBlock(tnn.Module):
        """zoo.BasicBlock: conv3x3-bn-relu, conv3x3-bn, shortcut (1x1 conv-bn when the
        shape changes), add, relu; convs without bias."""

        def __init__(self, c_in, c, stride):
            super().__init__()
            self.conv1 = tnn.Conv2d(c_in, c, 3, stride=stride, padding=1, bias=False)
            self.bn1 = _bn(c)
            self.conv2 = tnn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn2 = _bn(c)
            if stride != 1 or c_in != c:
                self.down = tnn.Conv2d(c_in, c, 1, stride=stride, bias=False)
                self.down_bn = _bn(c)
            else:
                self.down = None

        def forward(self, x):
            y = tF.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            skip = self.down_bn(self.down(x)) if self.down is not None else x
            return tF.relu(y + skip)

    class TorchResNet(tnn.Module):
        def __init__(self, in_ch=3, widths=(16, 32, 64), blocks=1, num_classes=10):
            super().__init__()
            self.stem = tnn.Conv2d(in_ch, widths[0], 3, padding=1, bias=False)
            self.stem_bn = _bn(widths[0])
            stages, prev = [], widths[0]
            for i, w in enumerate(widths):
                for b in range(blocks):
                    stages.append(TorchBasicBlock(prev, w, 2 if (i > 0 and b == 0) else 1))
                    prev = w
            self.stages = tnn.ModuleList(stages)
            self.fc = tnn.Linear(prev, num_classes)

        def forward(self, x):
            y = tF.relu(self.stem_bn(self.stem(x)))
            for blk in self.stages:
                y = blk(y)
            return self.fc(tF.adaptive_avg_pool2d(y, 1).flatten(1))

    def torch_model(name, kw, shape):
        if name == "mlp":
            return TorchMLP(int(np.prod(shape[1:])), **kw)
        if name == "cnn":
            return TorchCNN(shape[1], shape[2], **{k: v for k, v in kw.items()
                                                   if k == "channels"})
        if name == "resnet":
            return TorchResNet(shape[1], **kw)
        raise KeyError(name)


def copy_params_to_torch(sg_model, tmodel) -> None:
    """Copy singa_graph's initial parameters into the torch model (same order; Linear
    weights are stored transposed in singa_graph), so the first losses can be compared."""
    sg_params = list(sg_model.get_params().values())
    t_params = list(tmodel.parameters())
    if len(sg_params) != len(t_params):
        raise RuntimeError(f"parameter count differs: singa_graph {len(sg_params)}, "
                           f"torch {len(t_params)}")
    with torch.no_grad():
        for p, tp in zip(sg_params, t_params):
            a = np.asarray(p.data)
            if a.ndim == 2:  # Linear: (in, out) in singa_graph, (out, in) in torch
                a = a.T
            if tuple(a.shape) != tuple(tp.shape):
                raise RuntimeError(f"{p.name}: shape {p.shape} vs torch {tuple(tp.shape)}")
            tp.copy_(torch.from_numpy(np.ascontiguousarray(a)))


# ---------------------------------------------------------------------- runners
class SingaRunner:
    def __init__(self, name, cls, kw, x, y, graph: bool):
        random.seed(0)
        self.model = cls(**kw)
        self.model.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM))
        self.model.compile([x], is_train=True, use_graph=graph, schedule="memory")
        self.x, self.y = x, y
        self.first_loss = None

    def step(self):
        _, loss = self.model(self.x, self.y)
        return loss

    def warm(self, n):
        t0 = time.perf_counter()
        self.first_loss = np.asarray(self.step().data).item()
        first = time.perf_counter() - t0
        for _ in range(n - 1):
            self.step()
        return first


class TorchRunner:
    def __init__(self, name, kw, x, y):
        torch.manual_seed(0)
        self.model = torch_model(name, kw, x.shape)
        self.model.train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=MOMENTUM)
        self.x = torch.from_numpy(x)
        self.y = torch.from_numpy(y.astype(np.int64))
        self.first_loss = None

    def _fwd_bwd_update(self):
        out = self.model(self.x)
        loss = tF.cross_entropy(out, self.y)
        loss.backward()
        self.opt.step()
        return loss

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        return self._fwd_bwd_update()

    def warm(self, n):
        t0 = time.perf_counter()
        self.first_loss = float(self.step().item())
        first = time.perf_counter() - t0
        for _ in range(n - 1):
            self.step()
        return first

    def persistent_bytes(self) -> int:
        ts = list(self.model.parameters()) + list(self.model.buffers()) + [self.x, self.y]
        for st in self.opt.state.values():
            ts += [v for v in st.values() if torch.is_tensor(v)]
        return sum(t.numel() * t.element_size() for t in ts)

    def step_peak_bytes(self) -> tuple[int, str]:
        """Peak bytes allocated during one step above its starting level, and its label."""
        self.opt.zero_grad(set_to_none=True)
        try:
            return self._profiled_peak()
        except Exception as e:  # noqa: BLE001 - private profiler structures may change
            print(f"  (torch profiler memory events unusable: {type(e).__name__}: {e}; "
                  f"printing an estimate)")
            return self._estimate(), "estimate"

    def _profiled_peak(self) -> tuple[int, str]:
        from torch.profiler import ProfilerActivity, profile

        with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                                      record_shapes=False) as prof:
            self._fwd_bwd_update()
        sizes, exact = _allocation_events(prof)
        run = peak = 0
        for _, nbytes in sizes:
            run += nbytes
            peak = max(peak, run)
        grads = sum(p.grad.numel() * p.grad.element_size() for p in self.model.parameters()
                    if p.grad is not None)
        if peak < grads:  # every gradient was allocated during the step: must be counted
            raise RuntimeError(f"profiled peak {peak} B is below the gradient bytes {grads} B")
        return peak, "profiler" if exact else "profiler-ops"

    def _estimate(self) -> int:
        """Bytes of tensors saved for backward (distinct storages) plus gradient bytes."""
        self.opt.zero_grad(set_to_none=True)
        saved: dict[int, int] = {}
        params = {p.untyped_storage().data_ptr() for p in self.model.parameters()}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in params and ptr != self.x.untyped_storage().data_ptr():
                saved[ptr] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            self._fwd_bwd_update()
        grads = sum(p.grad.numel() * p.grad.element_size() for p in self.model.parameters())
        return sum(saved.values()) + grads


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's C++ side logs start/stop lines there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _allocation_events(prof) -> tuple[list[tuple[int, int]], bool]:
    """``(time_ns, bytes)`` of every CPU allocation (+) and free (-) the profiler recorded,
    in time order, and whether they are the exact events. The exact events come from the
    profiler's event tree; the public FunctionEvent list folds them into the enclosing ops
    (placed at the op's start), so it is only the fallback."""
    try:
        from torch._C._profiler import _EventType

        out = []
        stack = list(prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            e = stack.pop()
            if e.tag == _EventType.Allocation:
                f = e.extra_fields
                if str(f.device).startswith("cpu"):
                    out.append((e.start_time_ns, int(f.alloc_size)))
            stack.extend(e.children)
        if out:
            return sorted(out), True
    except (ImportError, AttributeError):
        pass
    # fallback: each event's self memory at its start time (approximate ordering)
    evs = [(int(e.time_range.start * 1000), int(e.self_cpu_memory_usage))
           for e in prof.events() if e.self_cpu_memory_usage]
    if not evs:
        raise RuntimeError("the profiler recorded no memory events")
    return sorted(evs), False


# ---------------------------------------------------------------------- timing
def timed_rounds(runners: dict, steps: int, rounds: int, pause: float) -> dict[str, list[float]]:
    """Run every runner ``steps`` timed times, in ``rounds`` rounds that take the frameworks
    in turn, so a change in machine load hits all of them alike.

    Before each framework's turn the process sleeps ``pause`` seconds and runs one untimed
    step: the thread pools of the framework that ran before (OpenBLAS and the two OpenMP
    runtimes poll for a while after their last job) would otherwise compete for the cores.
    """
    times = {k: [] for k in runners}
    clock = time.perf_counter
    per_round = -(-steps // rounds)
    done = 0
    while done < steps:
        m = min(per_round, steps - done)
        for k, r in runners.items():
            time.sleep(pause)
            r.step()
            step, ts = r.step, times[k]
            for _ in range(m):
                t0 = clock()
                step()
                ts.append(clock() - t0)
        done += m
    return times


def fmt_mib(b, width=12):
    return f"{b / MIB:{width}.2f}" if b is not None else f"{'-':>{width}}"


def bench_model(name, args, use_torch):
    cls, kw, shape, default_steps, desc = MODELS[name]
    steps = args.steps or default_steps
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, 10, shape[0]).astype(np.int32)

    print(f"\n== {desc}: {steps} timed steps per framework (after warm-up)")
    runners = {"singa_graph graph": SingaRunner(name, cls, kw, x, y, graph=True),
               "singa_graph eager": SingaRunner(name, cls, kw, x, y, graph=False)}
    if use_torch:
        runners["torch eager"] = TorchRunner(name, kw, x, y)
        copy_params_to_torch(runners["singa_graph graph"].model, runners["torch eager"].model)

    first = {k: r.warm(args.warmup) for k, r in runners.items()}
    losses = {k: r.first_loss for k, r in runners.items()}
    times = timed_rounds(runners, steps, args.rounds, args.pause)

    g = runners["singa_graph graph"]
    rep = g.model.memory_report()
    mem = {"singa_graph graph": (rep["arena_bytes"], rep["persistent_bytes"], "plan")}
    if use_torch:
        tr = runners["torch eager"]
        peak, how = tr.step_peak_bytes()
        mem["torch eager"] = (peak, tr.persistent_bytes(), how)

    print(f"  {'framework':<19}{'median ms':>10}{'p25-p75 ms':>17}{'1st step ms':>13}"
          f"{'transient MiB':>14}{'persist MiB':>12}  memory source (transient / persist)")
    med = {}
    for k, ts in times.items():
        ms = np.asarray(ts) * 1e3
        med[k] = float(np.median(ms))
        p25, p75 = np.percentile(ms, [25, 75])
        arena, pers, how = mem.get(k, (None, None, "not measured"))
        how = {"plan": "memory_report(): arena / persistent",
               "profiler": "torch.profiler: peak bytes allocated during the step / "
                           "params+momentum+BN stats+batch",
               "profiler-ops": "torch.profiler, per-op totals (approx. order): peak "
                               "bytes allocated during the step / params+momentum+BN "
                               "stats+batch",
               "estimate": "ESTIMATE: saved-for-backward + grads / "
                           "params+momentum+BN stats+batch"}.get(how, how)
        print(f"  {k:<19}{med[k]:>10.2f}{p25:>8.2f} -{p75:>7.2f}{first[k] * 1e3:>13.1f}"
              f"{fmt_mib(arena, 14)}{fmt_mib(pers)}  {how}")
    gm, em = med["singa_graph graph"], med["singa_graph eager"]
    line = f"  ratios: eager / graph = {em / gm:.2f}"
    if use_torch:
        tm = med["torch eager"]
        line += f"; graph / torch = {gm / tm:.2f}; eager / torch = {em / tm:.2f}"
        a_sg, a_t = mem["singa_graph graph"][0], mem["torch eager"][0]
        line += f"; transient singa_graph / torch = {a_sg / a_t:.2f}"
    print(line)
    print("  first-step loss (same initial weights): "
          + ", ".join(f"{k} {v:.6f}" for k, v in losses.items()))

    if args.profile:
        print("\n  singa_graph graph-mode profile (model.profile, repeat=5):")
        prof = g.model.profile(x, y, repeat=5)
        print("    " + prof.table(top=8).replace("\n", "\n    "))
        if use_torch:
            from torch.profiler import ProfilerActivity, profile

            tr = runners["torch eager"]
            with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as tp:
                for _ in range(5):
                    tr.step()
            print("\n  torch profile (5 steps, self CPU time):")
            table = tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
            print("    " + table.replace("\n", "\n    "))
    return med


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=0,
                    help="timed steps per framework and model (default: per model, "
                         + ", ".join(f"{k} {v[3]}" for k, v in MODELS.items()) + ")")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed steps per framework first (the first one compiles)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="the timed steps of each framework are split into this many turns")
    ap.add_argument("--pause", type=float, default=0.3,
                    help="seconds of sleep before each framework's turn (idle thread pools)")
    ap.add_argument("--profile", action="store_true",
                    help="also print per-op-type time tables (singa_graph and torch)")
    args = ap.parse_args(argv)
    names = [n.strip().lower() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    args.warmup = max(1, args.warmup)
    args.rounds = max(1, args.rounds)

    nthreads = numba.get_num_threads()
    blas = ""
    try:
        from threadpoolctl import threadpool_info

        blas = ", ".join(f"{i['internal_api']} {i['num_threads']}" for i in threadpool_info()
                         if i["user_api"] == "blas")
    except ImportError:
        pass
    use_torch = torch is not None
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, numba {numba.__version__}"
          + (f", torch {torch.__version__}" if use_torch else ""))
    print(f"cpus: {os.cpu_count()}; threads: numba {nthreads}"
          + (f", BLAS ({blas})" if blas else ""), end="")
    if use_torch:
        torch.set_num_threads(nthreads)
        print(f", torch {torch.get_num_threads()} (set to numba's)")
    else:
        print(f"\ntorch is not importable ({_TORCH_ERROR}); printing singa_graph columns only")
    print("median wall-clock ms per training step (forward + loss + backward + SGD momentum "
          "0.9); memory in MiB")

    t0 = time.perf_counter()
    summary = {}
    for n in names:
        summary[n] = bench_model(n, args, use_torch)

    print("\nsummary (median ms/step)")
    head = f"  {'model':<8}{'graph':>10}{'eager':>10}"
    if use_torch:
        head += f"{'torch':>10}{'graph/torch':>13}"
    head += f"{'eager/graph':>13}"
    print(head)
    for n, med in summary.items():
        g, e = med["singa_graph graph"], med["singa_graph eager"]
        row = f"  {n:<8}{g:>10.2f}{e:>10.2f}"
        if use_torch:
            t = med["torch eager"]
            row += f"{t:>10.2f}{g / t:>13.2f}"
        row += f"{e / g:>13.2f}"
        print(row)
    print(f"total time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
