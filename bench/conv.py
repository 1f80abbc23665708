"""Convolution kernels against PyTorch's, shape by shape.

For every distinct conv of the benchmark CNN (batch 64, 28x28, the bench/step_time.py
model), the example CNN (zoo.CNN with BatchNorm and branches, batch 32), the ResNet of
bench/step_time.py (16/32/64, batch 32, 32x32) and the small Xception of
examples/xception.py (batch 16, 32x32), it times the forward conv, the input gradient and
the weight gradient: singa_graph's CPU kernels (bound once to their planned workspace, as
in a plan) and PyTorch's (``torch.nn.functional.conv2d`` and
``torch.ops.aten.convolution_backward`` for one gradient at a time). Each framework runs
alone in its own process, the processes alternate for ``--rounds`` rounds, and the figure
is the median over all rounds. GFLOP/s counts 2*N*O*(C/groups)*kh*kw*Ho*Wo per kernel
(the direct algorithm's count, also for Winograd's, so the figures compare as speeds).
``--algo`` sets our convs' algorithm (``auto``: Winograd for the stride-1 3x3 convs with
enough channels; ``direct``: im2col + GEMM everywhere), to compare the two.

The grouped (depthwise) convs of torchvision's mobilenet_v2 and efficientnet_b0 come as
``mobilenet_v2``/``efficientnet_b0`` (batch 2 at 64x64, the inference shapes of
bench/onnx_models.py) and ``mobilenet_v2-train``/``efficientnet_b0-train`` (batch 8 at
64x64, training shapes); for these the forward conv is also timed on onnxruntime (a one-node
ONNX Conv with ``group=C``), and each row prints our GFLOP/s over the best of
PyTorch's (oneDNN) and onnxruntime's.

    python bench/conv.py [--models cnn,resnet,xception,mobilenet_v2] [--rounds 3] [--repeat 20]
                         [--algo auto|direct|winograd]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

KINDS = ("fwd", "dx", "dw")


def _models():
    from singa_graph import cli, zoo

    ex = cli.load_example("xception")
    cfg = dict(ex.SMALL)
    cfg.pop("size")
    return {
        "cnn": (lambda: zoo.CNN(bn=False, branches=False), (64, 1, 28, 28)),
        "cnn-example": (lambda: zoo.CNN(), (32, 1, 28, 28)),
        "resnet": (lambda: zoo.ResNet(widths=(16, 32, 64)), (32, 3, 32, 32)),
        "xception": (lambda: ex.XceptionModel(num_classes=10, in_channels=3, image_size=32,
                                              **cfg), (16, 3, 32, 32)),
    }


TORCHVISION = {"mobilenet_v2": 2, "efficientnet_b0": 2, "mobilenet_v2-train": 8,
               "efficientnet_b0-train": 8}


def torchvision_grouped_shapes(name) -> list[dict]:
    """The grouped convs (``groups > 1``) of a torchvision model at 64x64, as
    :func:`conv_shapes` rows, found by running the model with forward hooks."""
    import torch

    from torchvision_models import import_torchvision  # bench/ is the script's folder

    torchvision = import_torchvision()

    arch = name.split("-")[0]
    model = getattr(torchvision.models, arch)(weights=None).eval()
    out = []

    def hook(mod, inp, _):
        p = mod.padding
        out.append({"model": name, "x": tuple(inp[0].shape), "w": tuple(mod.weight.shape),
                    "stride": tuple(mod.stride), "padding": (p[0], p[1], p[0], p[1]),
                    "dilation": tuple(mod.dilation), "groups": mod.groups})
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d) and m.groups > 1:
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.zeros(TORCHVISION[name], 3, 64, 64))
    return out


def conv_shapes(names) -> list[dict]:
    """The distinct Conv2d nodes of the models' training graphs."""
    from singa_graph import opt

    seen, out = set(), []
    models = _models()
    for name in names:
        if name in TORCHVISION:
            for s in torchvision_grouped_shapes(name):
                key = (s["x"], s["w"], s["stride"], s["padding"], s["dilation"], s["groups"])
                if key not in seen:
                    seen.add(key)
                    out.append(s)
            continue
        make, shape = models[name]
        m = make()
        m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
        m.compile([np.zeros(shape, np.float32)], is_train=True)
        plan = m.plan_for(np.zeros(shape, np.float32), np.zeros(shape[0], np.int32))
        for n in plan.nodes:
            if n.type != "Conv2d" or len(n.inputs[0].shape) != 4:
                continue
            op = n.op
            key = (n.inputs[0].shape, n.inputs[1].shape, op.stride, op.padding,
                   op.dilation, op.groups)
            if key not in seen:
                seen.add(key)
                out.append({"model": name, "x": n.inputs[0].shape, "w": n.inputs[1].shape,
                            "stride": op.stride, "padding": op.padding,
                            "dilation": op.dilation, "groups": op.groups})
    return out


def flops(s, y_shape) -> float:
    o, cg, kh, kw = s["w"]
    return 2.0 * s["x"][0] * o * cg * kh * kw * y_shape[2] * y_shape[3]


def _time(fn, repeat) -> float:
    for _ in range(3):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def worker_ours(shapes, repeat, algo="auto") -> list:
    from singa_graph import ops
    from singa_graph.host import aligned_copy, aligned_empty
    from singa_graph.runtime.registry import bind, workspace_bytes

    # every array and workspace starts on a cache line, as a plan's arena buffers, the CPU
    # device's arrays and eager scratch do (numpy's start 16 bytes past one: a depthwise
    # 5x5 at 8x8, 240 channels, took 45 us on those against 38, one thread, 2026-12-02)
    rng = np.random.default_rng(0)
    res = []
    for s in shapes:
        a = (s["stride"], s["padding"], s["dilation"], s["groups"])
        x = aligned_copy(rng.standard_normal(s["x"]).astype(np.float32))
        w = aligned_copy(rng.standard_normal(s["w"]).astype(np.float32))
        fwd = ops.Conv2d(*a, algo=algo)
        y = aligned_empty(fwd.output_shape(x.shape, w.shape), np.float32)
        dy = aligned_copy(rng.standard_normal(y.shape).astype(np.float32))
        cases = [(fwd, [x, w], [y]),
                 (ops.Conv2dGradInput(*a, x_shape=x.shape, algo=algo), [dy, w],
                  [aligned_empty(x.shape, x.dtype)]),
                 (ops.Conv2dGradWeight(*a, w_shape=w.shape), [dy, x],
                  [aligned_empty(w.shape, w.dtype)])]
        row = {}
        for kind, (op, ins, outs) in zip(KINDS, cases):
            ws = aligned_empty(workspace_bytes(op, ins, outs), np.uint8)
            row[kind] = _time(bind(op, ins, outs, ws=ws), repeat)
            row[kind + "_ws"] = int(ws.nbytes)
        if s["groups"] > 1 and ops.Conv2dNHWC.supports(fwd, w.shape):
            # what an inference plan runs on a depthwise chain (passes/layout.py)
            op = ops.Conv2dNHWC(*a)
            ins = [aligned_copy(x.transpose(0, 2, 3, 1)), aligned_copy(w.transpose(2, 3, 1, 0))]
            outs = [aligned_empty((y.shape[0], y.shape[2], y.shape[3], y.shape[1]), np.float32)]
            ws = aligned_empty(workspace_bytes(op, ins, outs), np.uint8)
            row["fwd_nhwc"] = _time(bind(op, ins, outs, ws=ws), repeat)
        row["y"] = y.shape
        res.append(row)
    return res


def worker_torch(shapes, repeat) -> list:
    import numba
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(numba.get_num_threads())
    res = []
    g = torch.Generator().manual_seed(0)
    for s in shapes:
        (sh, sw), (pt, pl, pb, pr), dil, grp = (s["stride"], s["padding"], s["dilation"],
                                               s["groups"])
        if (pt, pl) != (pb, pr):
            res.append(None)  # torch takes symmetric padding only
            continue
        x = torch.randn(*s["x"], generator=g)
        w = torch.randn(*s["w"], generator=g)
        args = ([sh, sw], [pt, pl], list(dil))
        y = F.conv2d(x, w, None, *args, grp)
        dy = torch.randn(*y.shape, generator=g)

        def back(mask):
            return lambda: torch.ops.aten.convolution_backward(
                dy, x, w, None, *args, False, [0, 0], grp, mask)
        with torch.no_grad():
            row = {"fwd": _time(lambda: F.conv2d(x, w, None, *args, grp), repeat),
                   "dx": _time(back([True, False, False]), repeat),
                   "dw": _time(back([False, True, False]), repeat)}
        res.append(row)
    return res


def worker_ort(shapes, repeat) -> list:
    """Forward of the grouped convs on onnxruntime: a one-node ONNX Conv, weight as an
    initializer (None for ungrouped shapes, which bench/onnx_models.py covers)."""
    import numba
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from singa_graph.host import aligned_copy

    rng = np.random.default_rng(0)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = numba.get_num_threads()
    res = []
    for s in shapes:
        if s["groups"] == 1:
            res.append(None)
            continue
        x = aligned_copy(rng.standard_normal(s["x"]).astype(np.float32))  # as ours get it
        w = rng.standard_normal(s["w"]).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], strides=list(s["stride"]),
                                pads=list(s["padding"]), dilations=list(s["dilation"]),
                                group=s["groups"])
        graph = helper.make_graph(
            [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, s["x"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(w, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        res.append({"fwd": _time(lambda: sess.run(None, {"x": x}), repeat)})
    return res


def _print_grouped(shapes, runs):
    """Our GFLOP/s over the best of PyTorch's and onnxruntime's, per grouped conv."""
    rows = [i for i, s in enumerate(shapes) if s["groups"] > 1]
    if not rows or "torch" not in runs:
        return
    print("grouped convs: ours / best other GFLOP/s (fwd: max of torch and ORT; dx, dw: "
          "torch); target >= 0.8. nhwc: the channels-last forward of inference plans "
          "(ms and ratio)")
    print(f"{'model':<22}{'x':<18}{'w':<14}{'s':>2}{'fwd ms':>8}{'torch':>7}{'ort':>7}"
          f"{'fwd':>6}{'dx':>6}{'dw':>6}{'nhwc ms':>9}{'nhwc':>6}")
    worst = {k: [] for k in KINDS + ("nhwc",)}
    for i in rows:
        s = shapes[i]

        def med(side, k):
            return float(np.median([r[i][k] for r in runs[side] if r[i] is not None]))
        ours = {k: med("ours", k) for k in KINDS}
        torch_ = {k: med("torch", k) for k in KINDS}
        ort_fwd = med("ort", "fwd") if "ort" in runs else float("inf")
        best = {"fwd": min(torch_["fwd"], ort_fwd), "dx": torch_["dx"], "dw": torch_["dw"]}
        ratio = {k: best[k] / ours[k] for k in KINDS}
        nhwc = [r[i].get("fwd_nhwc") for r in runs["ours"] if r[i] is not None]
        nhwc = float(np.median(nhwc)) if nhwc and None not in nhwc else float("nan")
        ratio["nhwc"] = best["fwd"] / nhwc
        for k in KINDS + ("nhwc",):
            if np.isfinite(ratio[k]):
                worst[k].append(ratio[k])
        print(f"{s['model']:<22}{'x'.join(map(str, s['x'])):<18}"
              f"{'x'.join(map(str, s['w'])):<14}{s['stride'][0]:>2}{ours['fwd'] * 1e3:>8.3f}"
              f"{torch_['fwd'] * 1e3:>7.3f}{ort_fwd * 1e3:>7.3f}"
              + "".join(f"{ratio[k]:>6.2f}" for k in KINDS)
              + f"{nhwc * 1e3:>9.3f}{ratio['nhwc']:>6.2f}")
    print("min ratio: " + ", ".join(f"{k} {min(v):.2f}" for k, v in worst.items() if v)
          + "; median: " + ", ".join(f"{k} {np.median(v):.2f}" for k, v in worst.items()
                                     if v))


def _spawn(which, names, repeat, algo):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", which, "--models",
           ",".join(names), "--repeat", str(repeat), "--algo", algo]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{which} worker failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cnn,cnn-example,resnet,xception")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=20, help="timed calls per kernel and round")
    ap.add_argument("--algo", default="auto", choices=("auto", "direct", "winograd"),
                    help="our convs' algorithm")
    ap.add_argument("--worker", choices=("ours", "torch", "ort"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    shapes = conv_shapes(names)
    if args.worker:
        if args.worker == "ours":
            res = worker_ours(shapes, args.repeat, args.algo)
        else:
            res = {"torch": worker_torch, "ort": worker_ort}[args.worker](shapes, args.repeat)
        print(json.dumps(res))
        return
    try:
        import torch  # noqa: F401
        sides = ("ours", "torch")
    except ImportError:
        sides = ("ours",)
    if any(s["groups"] > 1 for s in shapes) and "torch" in sides:
        sides += ("ort",)
    runs = {k: [] for k in sides}
    for _ in range(args.rounds):
        for k in sides:
            time.sleep(0.5)
            runs[k].append(_spawn(k, names, args.repeat, args.algo))
    print(f"{time.strftime('%Y-%m-%d')}; {os.cpu_count()} cpus; median ms over {args.rounds} "
          f"alternating rounds x {args.repeat} calls, each framework alone in its process; "
          f"algo {args.algo}")
    head = f"{'model':<16}{'x':<18}{'w':<16}{'s':>2}{'g':>6}"
    for k in KINDS:
        head += f"{k + ' ms':>9}{'GF/s':>6}" + (f"{'torch':>7}{'GF/s':>6}" if "torch" in sides
                                                 else "")
    print(head + f"{'ws MiB':>8}")
    total = {k: [0.0, 0.0] for k in sides}
    for i, s in enumerate(shapes):
        ours = {k: float(np.median([r[i][k] for r in runs["ours"]])) for k in KINDS}
        theirs = None
        if "torch" in sides and runs["torch"][0][i] is not None:
            theirs = {k: float(np.median([r[i][k] for r in runs["torch"]])) for k in KINDS}
        f = flops(s, runs["ours"][0][i]["y"])
        line = (f"{s['model']:<16}{'x'.join(map(str, s['x'])):<18}"
                f"{'x'.join(map(str, s['w'])):<16}{s['stride'][0]:>2}{s['groups']:>6}")
        for k in KINDS:
            line += f"{ours[k] * 1e3:>9.3f}{f / ours[k] / 1e9:>6.0f}"
            if "torch" in sides:
                line += (f"{theirs[k] * 1e3:>7.3f}{f / theirs[k] / 1e9:>6.0f}" if theirs
                         else f"{'-':>7}{'-':>6}")
            total["ours"][0] += ours[k]
            if theirs:
                total["torch"][0] += theirs[k]
                total["ours"][1] += ours[k]
        ws = max(runs["ours"][0][i][k + "_ws"] for k in KINDS)
        print(line + f"{ws / 2**20:>8.2f}")
    if "torch" in sides and total["torch"][0]:
        print(f"sum over shapes torch can run: ours {total['ours'][1] * 1e3:.2f} ms, torch "
              f"{total['torch'][0] * 1e3:.2f} ms, ratio {total['ours'][1] / total['torch'][0]:.2f}")
    _print_grouped(shapes, runs)


if __name__ == "__main__":
    main()
