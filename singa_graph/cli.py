"""The ``singa-graph`` command.

    singa-graph train cnn --epochs 10          # run examples/cnn.py with these options
    singa-graph info resnet --batch-size 8     # graph summary, schedule and memory plan
    singa-graph info resnet --budget 64MiB     # ... planned to fit 64 MiB by recomputing
    singa-graph fit resnet --budget 64MiB      # the largest batch that fits, its step time
    singa-graph dump cnn --format html -o cnn.html   # graph, schedule and memory timeline
    singa-graph train xception --help
    singa-graph export cnn -o cnn.onnx          # an example model as ONNX (symbolic batch)
    singa-graph import cnn.onnx --train data.npz  # summary, memory plan, fine-tuning

``train`` runs the scripts in the repository's ``examples/`` folder (found next to the
package, so it needs a source checkout or an editable install).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys

MODELS = ("mlp", "cnn", "resnet", "xception")
SCHEDULES = ("sequential", "topological", "memory")


def int_at_least(low: int):
    """An argparse ``type``: an integer >= ``low``, refused with a clear message otherwise."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {v}")
        return v

    parse.__name__ = f"integer >= {low}"
    return parse


def float_in(low: float, high: float | None = None, low_open: bool = False):
    """An argparse ``type``: a finite float in ``[low, high)`` (``(low, high)`` when
    ``low_open``; no upper bound when ``high`` is None); NaN and infinities are refused."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        ok = math.isfinite(v) and (v > low if low_open else v >= low) and (
            high is None or v < high)
        if not ok:
            lo = f"> {low}" if low_open else f">= {low}"
            raise argparse.ArgumentTypeError(
                f"must be a finite number {lo}{'' if high is None else f' and < {high}'}, "
                f"got {text}")
        return v

    parse.__name__ = "number"
    return parse


def device_spec(text: str) -> str:
    """An argparse ``type``: ``cpu``, ``cuda`` or ``cuda:N`` (the device is made later, so
    ``--help`` works on machines without a GPU)."""
    s = text.strip().lower()
    if s in ("cpu", "cuda", "gpu") or (s.split(":", 1)[0] in ("cuda", "gpu") and
                                       s.split(":", 1)[-1].isdigit()):
        return s
    raise argparse.ArgumentTypeError(f"{text!r} is not a device: use cpu, cuda or cuda:N")


def examples_dir() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples")


def load_example(name: str):
    """Import ``examples/<name>.py`` as a module (examples/ is not a package)."""
    path = os.path.join(examples_dir(), f"{name}.py")
    if not os.path.isfile(path):
        raise SystemExit(f"singa-graph: example {path} not found (the examples ship with the "
                         f"source repository, not with the installed package)")
    spec = importlib.util.spec_from_file_location(f"singa_graph_example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_model(name: str, batch_size: int, small: bool = True):
    """``(model, input shape)`` of the model ``name`` as its example trains it."""
    from . import zoo

    if name == "mlp":
        return zoo.MLP(), (batch_size, 64)
    if name == "cnn":
        return zoo.CNN(), (batch_size, 1, 28, 28)
    if name == "resnet":
        return zoo.ResNet(), (batch_size, 1, 16, 16)
    if name == "xception":
        ex = load_example("xception")
        cfg = dict(ex.SMALL if small else ex.FULL)
        size = cfg.pop("size")
        return (ex.XceptionModel(num_classes=10, in_channels=3, image_size=size, **cfg),
                (batch_size, 3, size, size))
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def cmd_train(args) -> int:
    mod = load_example(args.model)
    saved, sys.argv[0] = sys.argv[0], f"singa-graph train {args.model}"  # for --help/usage
    try:
        mod.main(args.args)
    finally:
        sys.argv[0] = saved
    return 0


def compiled_plan(model_name: str, batch_size: int, schedule: str, full: bool = False,
                  train: bool = True, device: str = "cpu", budget=None):
    """The compiled training (or inference) plan of an example model, within ``budget``
    (see ``Model.compile``'s ``memory_budget``); nothing is run."""
    import numpy as np

    from . import opt, random as sg_random
    from .ir.tensor import Placeholder
    from .runtime.device import parse

    dev = parse(device)
    sg_random.seed(0)
    model, shape = build_model(model_name, batch_size, small=not full)
    model.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    x = Placeholder(shape, np.float32, device=dev, name="x")
    y = Placeholder((batch_size,), np.int32, device=dev, name="y")
    model.compile([x], is_train=train, use_graph=True, schedule=schedule, memory_budget=budget)
    return model.plan_for(x, y) if train else model.plan_for(x)


def cmd_info(args) -> int:
    from .errors import MemoryBudgetError

    try:
        plan = compiled_plan(args.model, args.batch_size, args.schedule, args.full,
                             device=args.device, budget=args.budget)
    except MemoryBudgetError as e:
        print(f"singa-graph info: {e}", file=sys.stderr)
        return 1
    print(plan.graph.summary())
    print(f"\nschedule: {plan.memory.schedule} ({len(plan.nodes)} steps)")
    r = plan.memory_report()
    print_memory(r)
    print(f"  {'arena / lower bound':<22} {r['arena_over_lower_bound']:.3f}")
    print(f"  {'arena / no reuse':<22} {r['arena_over_no_reuse']:.3f}")
    print(f"  {'in-place ops':<22} {r['inplace_ops']}")
    if r["budget_bytes"] is not None:
        print_budget(r)
    return 0


def print_budget(r) -> None:
    mib = float(1 << 20)
    print(f"  {'budget':<22} {r['budget_bytes'] / mib:10.3f} MiB")
    print(f"  {'arena without budget':<22} {r['unbudgeted_arena_bytes'] / mib:10.3f} MiB")
    print(f"  {'recomputed nodes':<22} {r['recomputed_nodes']}")
    print(f"  {'recompute FLOPs':<22} {100 * r['recompute_flops']:9.1f} % of the step")


def cmd_fit(args) -> int:
    """The largest batch size whose training plan fits the budget (recomputing values),
    found by doubling then bisection, and its step time predicted by the cost model."""
    from .errors import MemoryBudgetError
    from .passes.cost import step_seconds
    from .passes.remat import parse_budget

    try:
        budget = parse_budget(args.budget)
    except MemoryBudgetError as e:
        print(f"singa-graph fit: {e} (fit needs an absolute budget)", file=sys.stderr)
        return 2

    def plan_at(b):
        try:
            return compiled_plan(args.model, b, args.schedule, args.full, device=args.device,
                                 budget=budget)
        except MemoryBudgetError:
            return None

    good, bad, best = 0, None, None
    b = 1
    while b <= args.max_batch_size:
        p = plan_at(b)
        if p is None:
            bad = b
            break
        good, best, b = b, p, b * 2
    if good == 0:
        print(f"singa-graph fit: {args.model} does not fit {budget / (1 << 20):.3f} MiB "
              "even at batch size 1", file=sys.stderr)
        return 1
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        p = plan_at(mid)
        if p is None:
            bad = mid
        else:
            good, best = mid, p
    r = best.memory_report()
    print(f"{args.model}: largest batch size within {budget / (1 << 20):.3f} MiB: {good}"
          + ("" if bad is not None else f" (the largest tried, --max-batch-size)"))
    print(f"  {'arena':<22} {r['arena_bytes'] / (1 << 20):10.3f} MiB")
    print(f"  {'recomputed nodes':<22} {r['recomputed_nodes']}")
    print(f"  {'recompute FLOPs':<22} {100 * r['recompute_flops']:9.1f} % of the step")
    print(f"  {'predicted step time':<22} {1e3 * step_seconds(best.nodes):10.3f} ms "
          "(cost model: FLOPs and bytes moved)")
    return 0


def print_memory(r) -> None:
    mib = float(1 << 20)
    print("memory report:")
    for key in ("arena_bytes", "workspace_peak_bytes", "lower_bound_bytes", "no_reuse_bytes",
                "persistent_bytes", "plan_bytes"):
        print(f"  {key[:-6].replace('_', ' '):<22} {r[key] / mib:10.3f} MiB")


def cmd_export(args) -> int:
    import numpy as np

    from . import random as sg_random
    from .onnx import export

    sg_random.seed(0)
    model, shape = build_model(args.model, args.batch_size)
    model.compile([np.zeros(shape, np.float32)], is_train=False)
    proto = export(model, args.output, opset=args.opset, dynamic_batch=True)
    n = sum(int(np.prod(t.dims)) for t in proto.graph.initializer)
    print(f"wrote {args.output}: {len(proto.graph.node)} nodes, {n:,} weights, opset "
          f"{proto.opset_import[0].version}, batch dimension 'N'")
    return 0


def cmd_import(args) -> int:
    from collections import Counter

    import numpy as np

    from . import opt
    from .errors import SingaGraphError
    from .onnx import load
    from .runtime.device import parse

    try:
        model = load(args.model, device=parse(args.device))
    except SingaGraphError as e:
        print(f"singa-graph import: {e}", file=sys.stderr)
        return 1
    prog = model.program
    counts = Counter(n.op_type for n in prog.graph.node)
    print(f"{args.model}: opset {prog.opset}, {len(prog.graph.node)} nodes, "
          f"{len(prog.initializers)} initialisers")
    print("  ops: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
    for name, s in zip(prog.inputs, model.input_shapes()):
        print(f"  input  {name}: {'?' if s is None else tuple('N' if d is None else d for d in s)}")
    print(f"  outputs: {', '.join(prog.outputs)}")
    try:
        plan = model.plan_for(*model.example_inputs(args.batch_size))
    except SingaGraphError as e:
        print(f"singa-graph import: {e}", file=sys.stderr)
        return 1
    print(f"\ninference plan for batch {args.batch_size}: {len(plan.nodes)} steps, "
          f"{len(model.get_params())} parameters")
    print_memory(plan.memory_report())
    if args.train:
        with np.load(args.train) as d:
            x, y = d["x"].astype(np.float32), d["y"].astype(np.int32)
        model.set_optimizer(opt.SGD(lr=args.lr, momentum=0.9))
        model.train()
        bs = args.batch_size
        for epoch in range(args.epochs):
            losses = [model(x[i:i + bs], y[i:i + bs])[1].to_numpy().item()
                      for i in range(0, len(x) - bs + 1, bs)]
            print(f"epoch {epoch}: mean loss {np.mean(losses):.4f}")
        if args.output:
            from .onnx import export

            model.eval()
            export(model, args.output, inputs=[x[:bs]], dynamic_batch=True)
            print(f"wrote the fine-tuned model to {args.output}")
    return 0


def cmd_dump(args) -> int:
    import numpy as np

    from . import viz
    from .errors import SingaGraphError

    fmt = args.format or (viz.format_of(args.output) if args.output else "html")
    out = args.output or f"{args.model}.{fmt}"
    plan = compiled_plan(args.model, args.batch_size, args.schedule, args.full,
                         train=not args.eval, device=args.device)
    if args.profile:
        rng = np.random.default_rng(0)
        feeds = [rng.standard_normal(t.shape).astype(t.dtype) if t.dtype.kind == "f"
                 else rng.integers(0, 10, t.shape).astype(t.dtype) for t in plan.inputs]
        plan.profile(feeds, repeat=args.profile)
    try:
        viz.dump(plan, out, format=fmt, leaves=not args.no_leaves)
    except SingaGraphError as e:
        print(f"singa-graph dump: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({fmt}: {len(plan.nodes)} nodes, arena "
          f"{plan.memory.arena_bytes / (1 << 20):.3f} MiB)")
    if args.map:
        print(viz.memory_map(plan))
    return 0


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="singa-graph", description="Train and inspect the "
                                "singa_graph example models.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = sub.add_parser("train", help="train an example model",
                       description="Train an example model; the options after MODEL go to "
                       "the example (see `singa-graph train MODEL --help`).")
    t.add_argument("model", choices=MODELS, metavar="MODEL", help=" | ".join(MODELS))
    t.add_argument("args", nargs=argparse.REMAINDER,
                   help="options of the example (--epochs, --eager, ...)")
    t.set_defaults(func=cmd_train)

    i = sub.add_parser("info", help="print a model's training graph and memory plan",
                       description="Build the training graph of MODEL for one batch size and "
                       "print its summary, the schedule and the memory report.")
    i.add_argument("model", choices=MODELS, metavar="MODEL", help=" | ".join(MODELS))
    i.add_argument("--batch-size", type=int_at_least(1), default=32,
                   help="default: %(default)s")
    i.add_argument("--schedule", choices=SCHEDULES, default="memory",
                   help="default: %(default)s")
    i.add_argument("--full", action="store_true",
                   help="xception: the full 299x299 network instead of the small one")
    i.add_argument("--device", type=device_spec, default="cpu",
                   help="cpu (default), cuda or cuda:N")
    i.add_argument("--budget", default=None, metavar="BYTES",
                   help="plan the arena within this budget (64MiB, 50%%, bytes), "
                   "recomputing values")
    i.set_defaults(func=cmd_info)

    f = sub.add_parser("fit", help="the largest batch size whose training step fits a budget",
                       description="Find the largest batch size whose training plan of MODEL "
                       "fits --budget (the arena, workspace included, recomputing values "
                       "where needed) and print its predicted step time.")
    f.add_argument("model", choices=MODELS, metavar="MODEL", help=" | ".join(MODELS))
    f.add_argument("--budget", required=True, metavar="BYTES", help="e.g. 64MiB")
    f.add_argument("--schedule", choices=SCHEDULES, default="memory",
                   help="default: %(default)s")
    f.add_argument("--max-batch-size", type=int_at_least(1), default=4096,
                   help="default: %(default)s")
    f.add_argument("--full", action="store_true",
                   help="xception: the full 299x299 network instead of the small one")
    f.add_argument("--device", type=device_spec, default="cpu",
                   help="cpu (default), cuda or cuda:N")
    f.set_defaults(func=cmd_fit)

    from .viz import FORMATS

    d = sub.add_parser("dump", help="draw a model's graph, schedule and memory plan",
                       description="Compile the training (or --eval: inference) plan of MODEL "
                       "and write it as a picture or data file. Formats: "
                       + ", ".join(FORMATS) + " (svg and png need Graphviz's dot).")
    d.add_argument("model", choices=MODELS, metavar="MODEL", help=" | ".join(MODELS))
    d.add_argument("--format", choices=FORMATS, default=None,
                   help="default: from the suffix of -o, else html")
    d.add_argument("-o", "--output", default=None, metavar="PATH",
                   help="file to write (default: MODEL.FORMAT)")
    d.add_argument("--batch-size", type=int, default=32, help="default: %(default)s")
    d.add_argument("--schedule", choices=SCHEDULES, default="memory",
                   help="default: %(default)s")
    d.add_argument("--eval", action="store_true", help="the inference plan instead of the "
                   "training step")
    d.add_argument("--profile", type=int, default=0, metavar="N",
                   help="time every node over N runs on random data and show it (html)")
    d.add_argument("--no-leaves", action="store_true",
                   help="dot/svg/png: leave out inputs, parameters and state")
    d.add_argument("--map", action="store_true",
                   help="also print the arena's character map, one row per step")
    d.add_argument("--full", action="store_true",
                   help="xception: the full 299x299 network instead of the small one")
    d.add_argument("--device", type=device_spec, default="cpu",
                   help="cpu (default), cuda or cuda:N")
    d.set_defaults(func=cmd_dump)

    e = sub.add_parser("export", help="export an example model to ONNX",
                       description="Export the inference graph of an example model (freshly "
                       "initialised) to ONNX with a symbolic batch dimension.")
    e.add_argument("model", choices=MODELS, metavar="MODEL", help=" | ".join(MODELS))
    e.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    e.add_argument("--opset", type=int, default=None, help="ONNX opset (default: 17)")
    e.add_argument("--batch-size", type=int, default=1, help=argparse.SUPPRESS)
    e.set_defaults(func=cmd_export)

    m = sub.add_parser("import", help="import an ONNX model: summary, memory plan, training",
                       description="Import an ONNX model, print its summary and the memory "
                       "plan of its inference graph; with --train, fine-tune it on a .npz "
                       "file holding arrays x (inputs) and y (integer labels).")
    m.add_argument("model", metavar="MODEL.onnx")
    m.add_argument("--batch-size", type=int, default=32, help="default: %(default)s")
    m.add_argument("--train", metavar="DATA.npz", default=None,
                   help="fine-tune on arrays x and y of this file")
    m.add_argument("--epochs", type=int, default=1, help="default: %(default)s")
    m.add_argument("--lr", type=float, default=0.01, help="default: %(default)s")
    m.add_argument("-o", "--output", default=None, help="write the fine-tuned model here")
    m.add_argument("--device", type=device_spec, default="cpu",
                   help="cpu (default), cuda or cuda:N")
    m.set_defaults(func=cmd_import)
    return p


def main(argv=None) -> int:
    from .errors import DeviceError

    args = make_parser().parse_args(argv)
    try:
        return args.func(args)
    except DeviceError as e:  # e.g. --device cuda without a GPU: say so, no traceback
        print(f"singa-graph {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
