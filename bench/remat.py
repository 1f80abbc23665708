"""Memory budgets met by rematerialisation: arena against step time.

For each model, the training plan is compiled with budgets from 100% of the unbudgeted
arena down to the smallest feasible one; each row prints the arena, the share of the step's
FLOPs spent recomputing, and the measured step time (median of ``--steps`` steps) with its
ratio to the unbudgeted step. Chen et al.'s sqrt(n) checkpoints (``remat='chen'``) is the
baseline row; ``torch.utils.checkpoint`` around each block of the same architecture in
PyTorch (measured in a process of its own) is the comparison, with PyTorch's peak step
memory (its profiler) with and without it. Targets: at a 50% budget the step takes at
most 1.25x the unbudgeted one; the ResNet's smallest feasible budget is at most 35% of its
unbudgeted arena. ``--svg PATH`` draws the budget-time curves.

    python bench/remat.py [--models cnn,resnet,xception,gpt] [--steps 10] [--svg PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SHARES = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35)
MODELS = {  # name: (singa_graph factory spec, input shape, torch twin)
    "cnn": ({"bn": False, "branches": False}, (64, 1, 28, 28), "cnn"),
    "resnet": ({"widths": (16, 32, 64), "blocks": 2}, (32, 3, 32, 32), "resnet"),
    "xception": (None, (8, 3, 32, 32), None),
    "gpt": ({"blocks": 4, "d": 128, "heads": 4}, (16, 64, 128), "gpt"),
}


def _data(name):
    shape = MODELS[name][1]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    n = shape[0] * shape[1] if name == "gpt" else shape[0]
    return x, rng.integers(0, 10, n).astype(np.int32)


def singa_model(name, budget=None, remat="auto"):
    from singa_graph import cli, opt, random as sg_random, zoo

    sg_random.seed(0)
    kw, shape, _ = MODELS[name]
    if name == "cnn":
        m = zoo.CNN(**kw)
    elif name == "resnet":
        m = zoo.ResNet(**kw)
    elif name == "xception":
        m = cli.build_model("xception", shape[0])[0]
    else:
        import gpt_models
        m = gpt_models.singa_gpt(**kw)
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    m.compile([np.zeros(shape, np.float32)], is_train=True, use_graph=True,
              memory_budget=budget, remat=remat)
    return m


def paired_ms(base, m, x, y, steps):
    """Median ms per step of ``base`` and ``m``, their steps alternating (a busy machine
    slows both alike)."""
    for model in (base, m, base, m):
        model(x, y)
    tb, tm = [], []
    for _ in range(steps):
        for model, times in ((base, tb), (m, tm)):
            t0 = time.perf_counter()
            model(x, y)
            times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(tb)), 1e3 * float(np.median(tm))


def sweep(name, steps):
    from singa_graph.errors import MemoryBudgetError

    x, y = _data(name)
    base_model = singa_model(name)
    base = base_model.plan_for(x, y).memory.arena_bytes
    base_ms = paired_ms(base_model, base_model, x, y, steps)[0]
    try:
        singa_model(name, budget=1).plan_for(x, y)
        least = 1
    except MemoryBudgetError as e:
        least = e.minimum
    rows = []
    budgets = sorted({int(s * base) for s in SHARES if s * base >= least} | {least},
                     reverse=True)
    for b in budgets:
        t0 = time.perf_counter()
        m = singa_model(name, budget=b)
        r = m.plan_for(x, y).memory_report()
        compile_s = time.perf_counter() - t0
        ref_ms, ms = (base_ms, base_ms) if b == base else paired_ms(base_model, m, x, y,
                                                                     steps)
        rows.append(dict(kind="budget", budget=b, share=b / base, arena=r["arena_bytes"],
                         recompute=r["recompute_flops"], nodes=r["recomputed_nodes"],
                         ms=ms, ratio=ms / ref_ms, compile_s=compile_s))
    m = singa_model(name, remat="chen")
    r = m.plan_for(x, y).memory_report()
    ref_ms, ms = paired_ms(base_model, m, x, y, steps)
    rows.append(dict(kind="chen", budget=None, share=r["arena_bytes"] / base,
                     arena=r["arena_bytes"], recompute=r["recompute_flops"],
                     nodes=r["recomputed_nodes"], ms=ms, ratio=ms / ref_ms, compile_s=0))
    return base, base_ms, least, rows


# ---------------------------------------------------------------------------- PyTorch
def torch_worker(name, steps):
    """Runs in its own process: PyTorch's step time and peak step memory, without and
    with torch.utils.checkpoint around each block."""
    import torch
    import torch.utils.checkpoint as tcp

    import torch_models

    import numba

    torch_models.time = time  # its runner times steps with the module it is given
    torch.set_num_threads(numba.get_num_threads())  # the threads singa_graph runs on
    x, y = _data(name)
    kw = MODELS[name][0]
    out = {}
    for ckpt in (False, True):
        if name == "gpt":
            import gpt_models
            r = gpt_models.TorchGPTRunner(kw, x, y)
        else:
            r = torch_models.TorchRunner(MODELS[name][2], kw, x, y)
        blocks = getattr(r.model, "blocks", None) or getattr(r.model, "stages", None)
        if ckpt and blocks is not None:
            for blk in blocks:
                fwd = blk.forward
                blk.forward = (lambda f: lambda *a: tcp.checkpoint(f, *a,
                                                                   use_reentrant=False))(fwd)
        elif ckpt:  # the CNN: each conv-relu-pool stage
            for conv in (r.model.conv1, r.model.conv2):
                f = conv.forward
                conv.forward = (lambda g: lambda *a: tcp.checkpoint(g, *a,
                                                                    use_reentrant=False))(f)
        r.warm(3)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            r.step()
            times.append(time.perf_counter() - t0)
        peak, _ = r.step_peak_bytes()
        out["ckpt" if ckpt else "plain"] = dict(ms=1e3 * float(np.median(times)), peak=peak)
    print(json.dumps(out))


def torch_figures(name, steps):
    if MODELS[name][2] is None:
        return None
    p = subprocess.run([sys.executable, __file__, "--torch-worker", name, "--steps",
                        str(steps)], capture_output=True, text=True)
    if p.returncode:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr else "failed"}
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- picture
def svg(results, path):
    """Step time (x unbudgeted) against the budget (share of the unbudgeted arena)."""
    w, h, pad = 640, 400, 60
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    ratios = [r["ratio"] for res in results.values() for r in res[3]]
    ymax = max(1.5, max(ratios) * 1.05)
    ymin = min(0.9, min(ratios) * 0.97)
    xmax = max([1.05] + [r["share"] + 0.03 for res in results.values() for r in res[3]])

    def px(share, ratio):
        return (pad + (xmax - share) / (xmax - 0.15) * (w - 2 * pad),
                h - pad - (ratio - ymin) / (ymax - ymin) * (h - 2 * pad))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>']
    for s in (1.0, 0.8, 0.6, 0.4, 0.2):
        x, _ = px(s, 1.0)
        parts.append(f'<line x1="{x}" y1="{pad}" x2="{x}" y2="{h - pad}" stroke="#eee"/>'
                     f'<text x="{x}" y="{h - pad + 16}" text-anchor="middle">'
                     f'{int(s * 100)}%</text>')
    for k in range(5):
        ratio = ymin + k * (ymax - ymin) / 4
        _, y = px(1.0, ratio)
        parts.append(f'<line x1="{pad}" y1="{y}" x2="{w - pad}" y2="{y}" stroke="#eee"/>'
                     f'<text x="{pad - 6}" y="{y + 4}" text-anchor="end">{ratio:.2f}x</text>')
    _, y125 = px(1.0, 1.25)
    parts.append(f'<line x1="{pad}" y1="{y125}" x2="{w - pad}" y2="{y125}" '
                 'stroke="#999" stroke-dasharray="4 3"/>'
                 f'<text x="{w - pad - 4}" y="{y125 - 4}" text-anchor="end" fill="#777">'
                 'target at 50%: 1.25x</text>')
    for i, (name, (_, _, _, rows)) in enumerate(results.items()):
        c = colors[i % len(colors)]
        pts = [px(r["share"], r["ratio"]) for r in rows if r["kind"] == "budget"]
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="'
                     + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
        parts += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{c}"/>' for a, b in pts]
        for r in rows:
            if r["kind"] == "chen":
                a, b = px(r["share"], r["ratio"])
                parts.append(f'<rect x="{a - 4:.1f}" y="{b - 4:.1f}" width="8" height="8" '
                             f'fill="none" stroke="{c}" stroke-width="2"/>')
        parts.append(f'<text x="{w - pad - 120}" y="{pad + 16 * i}" fill="{c}">{name}</text>')
    parts.append(f'<text x="{w / 2}" y="{h - 14}" text-anchor="middle">memory budget '
                 '(share of the unbudgeted arena); squares: Chen sqrt(n)</text>'
                 f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" '
                 'text-anchor="middle">step time / unbudgeted step</text></svg>')
    with open(path, "w") as f:
        f.write("\n".join(parts))
    try:
        from singa_graph.viz.files import svg_to_png
        png = svg_to_png("\n".join(parts))
        with open(os.path.splitext(path)[0] + ".png", "wb") as f:
            f.write(png)
    except Exception as e:  # a missing converter leaves the SVG only
        print(f"(no PNG: {e})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="cnn,resnet,xception,gpt")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--svg", default=None, metavar="PATH")
    p.add_argument("--json", default=None, metavar="PATH", help="write the rows as JSON")
    p.add_argument("--replot", default=None, metavar="JSON",
                   help="draw --svg from a --json file instead of measuring")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--torch-worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.torch_worker:
        torch_worker(a.torch_worker, a.steps)
        return 0
    mib = float(1 << 20)
    if a.replot:
        with open(a.replot) as f:
            svg(json.load(f), a.svg)
        return 0
    results = {}
    for name in a.models.split(","):
        base, base_ms, least, rows = sweep(name, a.steps)
        results[name] = (base, base_ms, least, rows)
        print(f"\n{name}: unbudgeted arena {base / mib:.2f} MiB, step {base_ms:.2f} ms; "
              f"smallest feasible budget {least / mib:.2f} MiB ({100 * least / base:.1f}%)")
        print(f"  {'budget':>14} {'arena MiB':>10} {'share':>6} {'recompute':>9} "
              f"{'nodes':>5} {'step ms':>8} {'x base':>7} {'compile s':>9}")
        for r in rows:
            label = f"{100 * r['budget'] / base:.0f}%" if r["kind"] == "budget" else "chen sqrt(n)"
            mark = " *" if r["kind"] == "budget" and r["share"] <= 0.5 + 1e-9 and \
                r["share"] >= 0.45 and r["ratio"] > 1.25 else ""
            print(f"  {label:>14} {r['arena'] / mib:10.2f} {100 * r['share']:5.0f}% "
                  f"{100 * r['recompute']:8.1f}% {r['nodes']:5d} {r['ms']:8.2f} "
                  f"{r['ratio']:6.2f}x {r['compile_s']:9.1f}{mark}")
        if not a.no_torch:
            t = torch_figures(name, a.steps)
            if t is None:
                print("  torch.utils.checkpoint: no PyTorch twin of this model here")
            elif "error" in t:
                print(f"  torch: {t['error']}")
            else:
                pl, ck = t["plain"], t["ckpt"]
                print(f"  torch: step {pl['ms']:.2f} ms, peak {pl['peak'] / mib:.2f} MiB; "
                      f"with checkpoint per block: {ck['ms']:.2f} ms "
                      f"({ck['ms'] / pl['ms']:.2f}x), peak {ck['peak'] / mib:.2f} MiB "
                      f"({100 * ck['peak'] / max(pl['peak'], 1):.0f}%)")
        if name == "resnet":
            print(f"  target: smallest feasible <= 35% of the arena: "
                  f"{100 * least / base:.1f}% {'met' if least <= 0.35 * base else 'MISSED'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.svg:
        svg(results, a.svg)
        print(f"\nwrote {a.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
