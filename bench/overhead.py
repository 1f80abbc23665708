"""Per-node dispatch overhead of a compiled plan, against eager mode.

A chain of tiny elementwise ops (alternating ``x + c`` and ``x * c`` on a (4,) float32
tensor, 1000 nodes by default) is built on a Placeholder and compiled with the
'sequential' schedule (an inference graph: no autodiff, no optimizer). The kernels do almost
nothing, so the time per node is the cost of running one prepared step. The same chain is
also run in eager mode on concrete tensors under ``no_grad()``, where every op infers shapes,
allocates and looks up its kernel. Prints the median microseconds per node of both, their
ratio, and whether the plan meets the target of at most 5 us per node.

    python bench/overhead.py [--nodes 1000] [--runs 50]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import singa_graph as sg
from singa_graph import ops
from singa_graph.ir import Graph, building, no_grad
from singa_graph.passes import compile, verify

TARGET_US = 5.0


def chain(x, n, c_add, c_mul):
    """``n`` ops alternating add and mul with constant tensors."""
    for i in range(n):
        x = ops.add(x, c_add) if i % 2 == 0 else ops.mul(x, c_mul)
    return x


def median_seconds(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    times = []
    clock = time.perf_counter
    for _ in range(runs):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return float(np.median(times))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args(argv)
    n = args.nodes

    c_add = sg.Tensor(data=np.full(4, 0.01, np.float32), requires_grad=False, name="c_add")
    c_mul = sg.Tensor(data=np.full(4, 0.99, np.float32), requires_grad=False, name="c_mul")
    x_val = np.linspace(-1, 1, 4).astype(np.float32)

    # graph mode: build, compile, run
    x = sg.Placeholder((4,), name="x")
    t0 = time.perf_counter()
    with building():
        y = chain(x, n, c_add, c_mul)
    graph = Graph([y], inputs=[x])
    plan = compile(graph, schedule="sequential")
    compile_s = time.perf_counter() - t0
    verify(plan)
    assert len(plan.steps) == n
    feeds = {x: x_val}
    plan_s = median_seconds(lambda: plan.run(feeds), args.runs, warmup=5)
    steps = plan.steps

    def loop():
        for step in steps:
            step()

    loop_s = median_seconds(loop, args.runs, warmup=0)

    # eager mode: the same ops on concrete tensors, recording nothing
    xt = sg.Tensor(data=x_val, requires_grad=False)
    result = {}

    def eager():
        with no_grad():
            result["y"] = chain(xt, n, c_add, c_mul)

    eager_s = median_seconds(eager, max(args.runs // 2, 5), warmup=2)

    np.testing.assert_allclose(plan.run(feeds)[0], result["y"].data, rtol=1e-6)

    plan_us, loop_us, eager_us = (s / n * 1e6 for s in (plan_s, loop_s, eager_s))
    rep = plan.memory_report()
    print(f"chain of {n} elementwise ops (add/mul) on a (4,) float32 tensor, "
          f"schedule 'sequential'")
    print(f"  compile          : {compile_s * 1e3:8.1f} ms (build + schedule + plan + bind); "
          f"arena {rep['arena_bytes']} B, {rep['inplace_ops']} in-place ops")
    print(f"  compiled plan    : {plan_us:8.3f} us/node  (plan.run, median of {args.runs}: "
          f"{plan_s * 1e3:.3f} ms per run)")
    print(f"    steps only     : {loop_us:8.3f} us/node  (the prepared step loop, no feed/fetch)")
    print(f"  eager mode       : {eager_us:8.3f} us/node  (no_grad, median of "
          f"{max(args.runs // 2, 5)}: {eager_s * 1e3:.3f} ms per chain)")
    print(f"  eager / plan     : {eager_us / plan_us:8.1f} x")
    met = plan_us <= TARGET_US
    print(f"  target <= {TARGET_US:g} us/node for the plan: {'MET' if met else 'NOT MET'}")
    return met


if __name__ == "__main__":
    main()
