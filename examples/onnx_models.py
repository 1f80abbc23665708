"""Run any ONNX model file: its summary, its memory plan and its speed against onnxruntime.

    python examples/onnx_models.py model.onnx [more.onnx ...] [--batch-size 2] [--repeat 20]
    python examples/onnx_models.py tiny_yolov2.onnx --device cuda

For each file: the opset, the op types and how often each occurs, the inputs and outputs,
the parameter count; then the compiled inference plan for random inputs of the declared
shapes (symbolic dimensions take ``--batch-size``) with its memory report; then the median
time of one call of the plan. Where onnxruntime is installed the same inputs run through an
``InferenceSession`` too: the example prints the largest difference of the outputs
(relative to the largest ORT output) and the time ratio. Integer inputs get random values
in ``[0, --int-high)`` (token ids); a model whose inputs declare no shape is reported and
skipped. A file that cannot be imported prints why and the next file is tried; the exit
status is the number of files that failed.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import numpy as np

from singa_graph.cli import device_spec, int_at_least, print_memory


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", metavar="MODEL.onnx", help="ONNX files to run")
    p.add_argument("--batch-size", type=int_at_least(1), default=1,
                   help="value of symbolic (batch) dimensions (default 1)")
    p.add_argument("--repeat", type=int_at_least(1), default=10,
                   help="timed calls per framework (default 10)")
    p.add_argument("--int-high", type=int_at_least(1), default=10,
                   help="integer inputs are drawn from [0, INT_HIGH) (default 10)")
    p.add_argument("--device", type=device_spec, default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--no-ort", action="store_true", help="do not compare with onnxruntime")
    return p.parse_args(argv)


def summary(model, path) -> None:
    prog = model.program
    counts = Counter(n.op_type for n in prog.graph.node)
    n_weights = sum(int(np.prod(a.shape)) for a in prog.initializers.values())
    print(f"{path}: opset {prog.opset}, {len(prog.graph.node)} nodes, "
          f"{len(prog.initializers)} initialisers ({n_weights:,} values)")
    print("  ops: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
    for name, s in zip(prog.inputs, model.input_shapes()):
        shape = "?" if s is None else tuple("N" if d is None else d for d in s)
        print(f"  input  {name}: {shape}")
    print(f"  outputs: {', '.join(prog.outputs)}")


def random_inputs(model, batch: int, int_high: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for x in model.example_inputs(batch):
        if x.dtype.kind in "iu":
            out.append(rng.integers(0, int_high, x.shape).astype(x.dtype))
        elif x.dtype.kind == "b":
            out.append(rng.integers(0, 2, x.shape).astype(bool))
        else:
            out.append(rng.standard_normal(x.shape).astype(x.dtype))
    return out


def median_ms(fn, repeat: int) -> float:
    fn()  # warm-up: compiles (ours) or initialises (ORT)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def run_one(path: str, args) -> bool:
    from singa_graph.errors import SingaGraphError
    from singa_graph.onnx import load
    from singa_graph.runtime.device import parse

    try:
        model = load(path, device=parse(args.device))
        summary(model, path)
        xs = random_inputs(model, args.batch_size, args.int_high)
        plan = model.plan_for(*xs)
    except SingaGraphError as e:
        print(f"{path}: {type(e).__name__}: {e}", file=sys.stderr)
        return False
    print(f"\ninference plan for batch {args.batch_size}: {len(plan.nodes)} steps, "
          f"schedule {plan.memory.schedule}")
    print_memory(plan.memory_report())

    def ours():
        outs = model(*xs)
        return [o.to_numpy() for o in (outs if isinstance(outs, tuple) else (outs,))]

    got = ours()
    ms = median_ms(ours, args.repeat)
    print(f"\nsinga_graph: {ms:.3f} ms per call (median of {args.repeat})")
    if args.no_ort:
        return True
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime is not installed: no comparison")
        return True
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), xs)}
    want = sess.run(None, feeds)
    worst = max(float(np.abs(g.astype(np.float64) - w).max() / max(np.abs(w).max(), 1e-30))
                for g, w in zip(got, want))
    ort_ms = median_ms(lambda: sess.run(None, feeds), args.repeat)
    print(f"onnxruntime: {ort_ms:.3f} ms per call; singa_graph / ORT = {ms / ort_ms:.2f}")
    print(f"max |ours - ORT| / max |ORT| over the outputs: {worst:.2e}")
    return True


def main(argv=None) -> int:
    args = parse_args(argv)
    failed = 0
    for i, path in enumerate(args.models):
        if i:
            print("\n" + "-" * 72)
        failed += not run_one(path, args)
    return failed


if __name__ == "__main__":
    sys.exit(main())
