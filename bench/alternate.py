"""How the benchmarks time frameworks against each other: each alone in its own process,
alternating, medians.

A worker is a fresh ``python <script> --worker ...`` that builds, warms up and times one
framework on one model, then prints its result as one JSON line (the last line of its
stdout). A driver runs the workers of all frameworks in turn (a, b, c, a, b, c, ...) for a
number of rounds, so a change in machine load hits all of them alike, and no thread pool of
one framework idles on the cores of another.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np


def spawn(script: str, argv: list[str], env: dict | None = None) -> dict:
    """Run ``python script *argv`` with the bench directory on the path; its JSON result.

    Raises RuntimeError with the tail of the worker's stderr when it exits with an error."""
    here = os.path.dirname(os.path.abspath(__file__))
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join([here, full_env.get("PYTHONPATH", "")])
    cmd = [sys.executable, os.path.abspath(script), *argv]
    res = subprocess.run(cmd, capture_output=True, text=True, env=full_env)
    if res.returncode:
        raise RuntimeError(f"worker {' '.join(argv)} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def alternate(frameworks, rounds: int, run_one, pause: float = 0.5, progress=None) -> dict:
    """``{fw: [run_one(fw, round) for each round]}``, the frameworks taking turns.

    ``run_one`` returning None drops that framework from the later rounds (it failed);
    ``progress``, if given, is called once per framework and round, run or dropped."""
    results = {fw: [] for fw in frameworks}
    active = list(frameworks)
    for r in range(rounds):
        for fw in frameworks:
            if fw not in active:
                if progress is not None:
                    progress()
                continue
            time.sleep(pause)
            out = run_one(fw, r)
            if progress is not None:
                progress()
            if out is None:
                active.remove(fw)
            else:
                results[fw].append(out)
    return results


def time_calls(fn, steps: int, warmup: int) -> list[float]:
    """Seconds per call of ``fn()`` over ``steps`` calls, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def median_ms(runs: list[dict], key: str = "times") -> float:
    """Median, in ms, of every timed call of every run (NaN when there is none)."""
    if not runs:
        return float("nan")
    return float(np.median(np.concatenate([np.asarray(o[key]) for o in runs])) * 1e3)
