"""Data-parallel training step over MPI: step time, hidden all-reduce time, bytes per step.

Models (each rank trains on its own batch; graph mode, schedule 'memory', SGD momentum 0.9):

    CNN     zoo.CNN(bn=False, branches=False), batch 64 per rank, 1x28x28
    ResNet  zoo.ResNet(widths=(16, 32, 64)), batch 32 per rank, 3x32x32

For each model and each rank count (1, 2, 4 by default) this script launches
``mpiexec -n N python bench/dist.py --worker ...`` with the mpiexec of this interpreter's
environment, and every worker reports:

* threads: the threads each rank's kernels run on: its share of the machine's cores
  (``cores // ranks on the host``, found from MPI's shared-memory communicator; see
  singa_graph.dist.comm), unless ``SINGA_GRAPH_NUM_THREADS`` or ``NUMBA_NUM_THREADS`` is set;
* step: the median wall-clock time of one training step (``model(x, y)``), slowest rank;
* exposed: the median time per step spent blocked in the all-reduce waits (AllReduceWait),
  i.e. communication the backward did not hide (it includes waiting for a slower rank);
* alone: the median time of the same bucket all-reduces run back to back with no compute
  (one Iallreduce per bucket, then the waits: the communication cost to hide);
* hidden: ``1 - exposed / alone``, clipped to [0, 1]: the share of the all-reduce time that
  overlapped the backward;
* buckets / payload: fused buckets per step (``--threshold`` elements, see DistOpt) and
  their bytes (all gradients, float32);
* sent: bytes each rank sends per step by a bandwidth-optimal (ring) all-reduce,
  ``2 (N - 1) / N * payload``. MPICH picks its own algorithm per message size (recursive
  doubling sends ``log2(N) * payload`` for small messages), so this is the lower bound.

On one machine the ranks share its cores: with more ranks than cores each rank runs slower,
and the progress thread that drives in-flight all-reduces (see singa_graph.dist.comm) gets
less time. The last bucket (the first layers' gradients) has little or no backward left to
hide behind. Numbers taken while other work runs on the machine are not comparable.

Target: with as many ranks as cores (each rank one thread), the CNN step is at most
``TARGET`` (2.2) times the one-rank step, which runs on every core.

    python bench/dist.py [--ranks 1,2,4] [--models cnn,resnet] [--steps 20] [--warmup 3]
                         [--threshold 4096]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

MODELS = {"cnn": ((1, 28, 28), 64), "resnet": ((3, 32, 32), 32)}
TARGET = 2.2  # N ranks on N cores: step <= TARGET x the one-rank step


def build(name: str):
    from singa_graph import zoo

    if name == "cnn":
        return zoo.CNN(bn=False, branches=False)
    return zoo.ResNet(widths=(16, 32, 64))


def worker(args) -> None:
    from singa_graph import opt, random as sg_random
    from singa_graph.dist import DistOpt

    d = DistOpt(opt.SGD(lr=0.01, momentum=0.9), threshold=args.threshold)
    comm = d.communicator
    shape, batch = MODELS[args.model]
    sg_random.seed(0)
    m = build(args.model)
    m.set_optimizer(d)
    rng = np.random.default_rng(d.global_rank)
    x = rng.random((batch,) + shape).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    m.compile([x], is_train=True, use_graph=True)
    for _ in range(args.warmup):
        m(x, y)
    steps, waits = [], []
    for _ in range(args.steps):
        comm.barrier()
        w0 = comm.stats["wait_s"]
        t0 = time.perf_counter()
        m(x, y)
        steps.append(time.perf_counter() - t0)
        waits.append(comm.stats["wait_s"] - w0)
    buckets = [n.outputs[0] for n in m.last_plan.nodes if n.type == "AllReduceStart"]
    bufs = [np.zeros(t.shape, t.dtype) for t in buckets]
    alone = []
    for _ in range(args.steps):
        comm.barrier()
        t0 = time.perf_counter()
        reqs = [comm.iallreduce(b) for b in bufs]
        for r in reqs:
            comm.wait(r, "bench all-reduce")
        alone.append(time.perf_counter() - t0)
    row = {"step": float(np.median(steps)), "exposed": float(np.median(waits)),
           "alone": float(np.median(alone)), "buckets": len(bufs),
           "payload": int(sum(b.nbytes for b in bufs)), "threads": comm.num_threads}
    every = comm.comm.gather(row, root=0)
    if d.global_rank == 0:
        slow = max(every, key=lambda r: r["step"])
        print(json.dumps(dict(slow, ranks=d.world_size)), flush=True)


def launch(model: str, n: int, args) -> dict:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [mpiexec, "-n", str(n), sys.executable, os.path.abspath(__file__), "--worker",
           "--model", model, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--threshold", str(args.threshold)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.limit)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def report(model: str, r: dict) -> str:
    n = r["ranks"]
    sent = 2 * (n - 1) / n * r["payload"]
    hidden = "n/a" if n == 1 or r["alone"] <= 0 else \
        f"{100 * min(1.0, max(0.0, 1 - r['exposed'] / r['alone'])):.0f}%"
    return (f"{model:<8}{n:>6}{r['threads']:>9}{r['step'] * 1e3:>11.1f}{r['exposed'] * 1e3:>13.2f}"
            f"{r['alone'] * 1e3:>11.2f}{hidden:>9}{r['buckets']:>9}"
            f"{r['payload'] / 2**20:>13.3f}{sent / 2**20:>12.3f}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", default="cnn", help=argparse.SUPPRESS)
    p.add_argument("--models", default="cnn,resnet")
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threshold", type=int, default=4096,
                   help="fusion threshold in elements (default %(default)s: several buckets "
                   "per step for these small models; SINGA's 2097152 puts all their "
                   "gradients in one bucket, which has no backward left to overlap)")
    p.add_argument("--limit", type=int, default=600, help="seconds per launch")
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    cores = os.cpu_count()
    print(f"data-parallel step over MPI on one machine ({cores} cores), graph mode; times in "
          "ms (median, slowest rank), bytes in MiB per step and rank")
    print(f"{'model':<8}{'ranks':>6}{'threads':>9}{'step':>11}{'exposed':>13}{'alone':>11}"
          f"{'hidden':>9}{'buckets':>9}{'payload':>13}{'sent':>12}")
    verdicts = []
    for model in args.models.split(","):
        rows = {}
        for n in (int(k) for k in args.ranks.split(",")):
            rows[n] = launch(model, n, args)
            print(report(model, rows[n]), flush=True)
        if model == "cnn" and 1 in rows and cores in rows:
            ratio = rows[cores]["step"] / rows[1]["step"]
            verdicts.append(f"target: cnn, {cores} ranks on {cores} cores <= {TARGET}x the "
                            f"one-rank step: {ratio:.2f}x "
                            f"{'ok' if ratio <= TARGET else 'MISS'}")
    for v in verdicts:
        print(v)


if __name__ == "__main__":
    main()
