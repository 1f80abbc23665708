"""Compile time of deep MLPs: trace, autodiff, optimizer updates, schedule, memory plan and
kernel binding of a training step, Numba JIT excluded (a small model compiles first).

Deep MLPs of width 64 (batch 32), SGD with momentum, the memory-aware schedule. For each
depth it prints the node count, the compile time, and the arena over its live-bytes lower
bound; the target is compile time in O(n log n) (the 4000-layer time at most 5x the 1000-layer
time) with the arena at its bound.

    python bench/compile.py [--depths 500 1000 2000 4000 8000] [--repeat 3]

Each time is the fastest of ``--repeat`` compiles (the least disturbed by other load).
"""
import argparse
import sys
import time

import numpy as np

from singa_graph import opt, random, zoo

sys.setrecursionlimit(100_000)


def compile_time(depth: int, schedule: str, width: int = 64, batch: int = 32):
    random.seed(0)
    m = zoo.MLP(hidden=(width,) * depth, num_classes=10)
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    x = np.zeros((batch, width), np.float32)
    y = np.zeros(batch, np.int32)
    m.compile([x], is_train=True, use_graph=True, schedule=schedule)
    t0 = time.perf_counter()
    plan = m.plan_for(x, y)
    seconds = time.perf_counter() - t0
    return len(plan.nodes), seconds, plan.memory_report()["arena_over_lower_bound"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depths", type=int, nargs="+", default=[500, 1000, 2000, 4000, 8000])
    p.add_argument("--repeat", type=int, default=3, help="compiles per depth (fastest kept)")
    p.add_argument("--schedule", default="memory",
                   choices=("sequential", "topological", "memory"))
    args = p.parse_args(argv)
    compile_time(4, args.schedule)  # JIT-compile (or load) every kernel first
    print(f"{'layers':>8}{'nodes':>9}{'compile s':>11}{'s / 1k nodes':>14}{'arena/bound':>13}")
    times = {}
    for d in args.depths:
        runs = [compile_time(d, args.schedule) for _ in range(max(args.repeat, 1))]
        n, s, ratio = min(runs, key=lambda r: r[1])
        times[d] = s
        print(f"{d:>8}{n:>9}{s:>11.2f}{1e3 * s / n:>14.3f}{ratio:>13.3f}", flush=True)
    if 1000 in times and 4000 in times:
        r = times[4000] / times[1000]
        print(f"4000-layer / 1000-layer compile time: {r:.2f} (target <= 5)")


if __name__ == "__main__":
    main()
