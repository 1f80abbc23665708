"""How the benchmarks time frameworks against each other: each alone in its own process,
alternating, medians.

A worker is a fresh ``python <script> --worker ...`` that builds, warms up and times one
framework on one model, then prints its result as one JSON line (the last line of its
stdout). A driver runs the workers of all frameworks in turn (a, b, c, a, b, c, ...) for a
number of rounds, so a change in machine load hits all of them alike, and no thread pool of
one framework idles on the cores of another.

On a shared host whose speed changes by 2x over seconds (a 256x256 matmul on one thread
took 230-710 us from one second to the next on the 2-vCPU VM, 2026-11-28), a worker's few
dozen timed calls sample one such moment, and a ratio of two workers' medians compares
two moments. :func:`interleave` keeps one worker per framework alive (:class:`Worker`,
:func:`serve` on its side) and times them in short bursts in turn, a pause between bursts
so that the last one's thread pools have gone to sleep: each burst of one framework has a
burst of the other within a fraction of a second, and :func:`paired_ratio` compares those.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
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


# ------------------------------------------------------------ interleaved bursts
#: the prefix of the lines a serving worker answers with (libraries may print to stdout)
_TAG = "@@bench "


def serve(fn, ready: dict) -> None:
    """The worker's side of :class:`Worker`: print ``ready`` (a JSON-able dict), then for
    each number ``n`` read from stdin time ``n`` calls of ``fn`` and print their seconds;
    ``0`` or the end of stdin ends it. A ``ready`` with an ``"error"`` ends it at once."""
    print(_TAG + json.dumps(ready), flush=True)
    if "error" in ready:
        return
    for line in sys.stdin:
        n = int(line)
        if n <= 0:
            break
        print(_TAG + json.dumps(time_calls(fn, n, 0)), flush=True)


class Worker:
    """A worker process kept alive between bursts: ``python script *argv`` that calls
    :func:`serve` once it is built and warmed up. ``ready`` is what it sent then."""

    def __init__(self, script: str, argv: list[str], env: dict | None = None):
        here = os.path.dirname(os.path.abspath(__file__))
        full_env = dict(os.environ, **(env or {}))
        full_env["PYTHONPATH"] = os.pathsep.join([here, full_env.get("PYTHONPATH", "")])
        self._err = tempfile.TemporaryFile("w+")  # a pipe left unread could fill and block
        self._proc = subprocess.Popen([sys.executable, os.path.abspath(script), *argv],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._err, text=True, env=full_env)
        self.ready = self._answer()

    def _answer(self):
        for line in self._proc.stdout:
            if line.startswith(_TAG):
                return json.loads(line[len(_TAG):])
        self._proc.wait()
        self._err.seek(0)
        raise RuntimeError(f"worker exited with {self._proc.returncode}:\n"
                           f"{self._err.read()[-3000:]}")

    def time(self, calls: int) -> list[float]:
        """Seconds of each of ``calls`` calls, timed now."""
        self._proc.stdin.write(f"{calls}\n")
        self._proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write("0\n")
                self._proc.stdin.close()
            except OSError:
                pass
            self._proc.wait()
        self._err.close()


def interleave(frameworks, rounds: int, start, bursts: int, calls: int, pause: float = 0.1,
               progress=None) -> dict:
    """``{fw: [result of each round]}``. Each round starts a :class:`Worker` per framework,
    one at a time (``start(fw, round)`` returns it), then times ``bursts`` bursts of
    ``calls`` calls from each in turn, sleeping ``pause`` seconds before each burst and
    rotating who goes first; a round's result is its worker's ``ready`` dict with
    ``"bursts"`` (each burst's seconds) and ``"times"`` (all of them) added. A worker
    that could not start (an exception, or ``"error"`` in its ``ready``) gives that
    dict (or ``{"error": ...}``) and drops its framework from the later rounds.
    ``progress``, if given, is called once per framework and round."""
    results = {fw: [] for fw in frameworks}
    active = list(frameworks)
    for r in range(rounds):
        workers = {}
        try:
            for fw in active:
                time.sleep(pause)
                try:
                    w = start(fw, r)
                except RuntimeError as e:
                    w = None
                    res = {"error": "worker died: " + str(e).strip().splitlines()[-1][:120]}
                if w is not None:
                    res = dict(w.ready)
                    if "error" in res:
                        w.close()
                    else:
                        workers[fw] = w
                        res["bursts"] = []
                results[fw].append(res)
            order = list(workers)
            for b in range(bursts):
                k = (r * bursts + b) % max(1, len(order))
                for fw in order[k:] + order[:k]:
                    if fw not in workers:
                        continue
                    time.sleep(pause)
                    try:
                        results[fw][-1]["bursts"].append(workers[fw].time(calls))
                    except (RuntimeError, OSError) as e:  # it crashed while timing
                        results[fw][-1]["error"] = ("worker died: " +
                                                    (str(e).strip().splitlines() or [""])[-1][:120])
                        workers.pop(fw).close()
        finally:
            for w in workers.values():
                w.close()
        for fw in list(active):
            last = results[fw][-1]
            if "error" in last:
                active.remove(fw)
            else:
                last["times"] = [t for burst in last["bursts"] for t in burst]
        for _ in frameworks:
            if progress is not None:
                progress()
    return results


def paired_ratio(a_runs: list[dict], b_runs: list[dict]) -> float:
    """The median over the bursts of :func:`interleave` of (a's burst median / b's burst
    median), each burst of ``a`` paired with ``b``'s of the same round and index."""
    ratios = [np.median(x) / np.median(y)
              for ra, rb in zip(a_runs, b_runs) if "bursts" in ra and "bursts" in rb
              for x, y in zip(ra["bursts"], rb["bursts"])]
    return float(np.median(ratios)) if ratios else float("nan")
