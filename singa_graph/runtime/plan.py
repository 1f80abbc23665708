"""ExecutionPlan: a compiled graph bound to memory, ready to run many times.

Compiling binds every node's kernel to numpy views of its buffers once (transient tensors in
the arena, persistent ones in their own arrays: parameters and state are the Tensors' own
``data``, so updates made by the plan are seen by the model and by eager code). Running is a
loop over prepared zero-argument steps: no allocation, shape inference or look-up per step.
"""
from __future__ import annotations

import operator
import threading
import time
from collections import defaultdict
from typing import NamedTuple

import numpy as np

from ..errors import DeviceError, DTypeError, GraphError, ShapeError, StateUndefinedError
from .checks import check_feed_values, check_indices, index_feed_checks
from .device import get_default_device
from . import threads
from .registry import binder


_WRITES = operator.attrgetter("writes")


class ExecutionPlan:
    """Run a compiled graph: ``plan.run(feeds)`` returns the fetched outputs as numpy arrays.

    Attributes:
        graph: the compiled Graph.
        memory: the :class:`~singa_graph.passes.memory.MemoryPlan`.
        inputs: the Placeholders to feed, in order.
        fetches: the tensors ``run`` returns.
    """

    def __init__(self, graph, memory, fetches=None, device=None, poison: bool = False,
                 arena=None, preset=None):
        """``arena`` and ``preset`` bind the plan into memory its caller owns (the body of a
        control-flow op runs in that op's workspace): ``arena`` is a byte array of at least
        ``memory.arena_bytes``, and ``preset`` maps ``id(tensor)`` of persistent tensors
        (inputs, outputs) to the arrays they are bound to instead of buffers of their own."""
        self.graph = graph
        self.memory = memory
        self.inputs = list(graph.inputs)
        self.fetches = list(graph.outputs if fetches is None else fetches)
        self.device = device or (self.inputs[0].device if self.inputs else
                                 get_default_device())
        self.poison = poison
        self.last_profile = None  # the most recent profile(), shown by viz.dump
        dev = self.device
        kind = dev.kind
        if arena is not None and arena.nbytes < memory.arena_bytes:
            raise GraphError(f"an arena of {arena.nbytes} bytes cannot hold this plan's "
                             f"{memory.arena_bytes}")
        self.arena = dev.arena(memory.arena_bytes) if arena is None else \
            arena[:memory.arena_bytes]
        self._preset = dict(preset or {})
        self._owned_bytes = 0  # persistent buffers this plan allocated itself
        # a plan that writes state (updates, running statistics) refuses empty batches: it
        # would move parameters on no data
        self._mutates_state = any(n.op.mutates for n in graph.nodes)
        self.created_state_bytes = 0  # optimizer state created while tracing (set by Model)
        # constants folded from parameters at compile time (passes/inference.py): the plan
        # owns them, and refresh_folded() recomputes them after the parameters change
        self.folds = list(getattr(graph, "folds", ()))
        self._owned_bytes += sum(f.nbytes for f in self.folds)
        # scratch running statistics of recomputed BatchNorms (passes/remat.py)
        self._owned_bytes += getattr(graph, "remat_scratch_bytes", 0)
        self._folded_version = None  # see refresh_folded
        # the folds' parameters, each once: their write counters only grow, so their sum
        # moves exactly when one of them moved (one sum per run, where asking each fold
        # took 16 us a call on mobilenet_v2's 52 folds); None until the first refresh
        self._fold_sources = list({id(t): t for f in self.folds for t in f.sources
                                   if t is not None}.values())
        self._fold_writes = None
        self._arrays = self._bind_arrays()
        self._feed_arrays = [self._arrays[id(t)] for t in self.inputs]
        self._by_name = {t.name: i for i, t in enumerate(self.inputs)}
        self._by_id = {id(t): i for i, t in enumerate(self.inputs)}
        names = [t.name for t in self.inputs]
        self._ambiguous = {n for n in names if names.count(n) > 1}
        self._index_checks = index_feed_checks(graph, self.inputs)
        self._lock = threading.RLock()  # concurrent runs share the arena: serialise them
        self._fetch_arrays = [self._arrays[id(t)] for t in self.fetches]
        # page-locked host buffers that feeds and fetches cross through (GPU plans only)
        self._feed_stage = [dev.staging(t.shape, t.dtype) for t in self.inputs]
        self._fetch_stage = [dev.staging(t.shape, t.dtype) for t in self.fetches]
        self.staging_bytes = sum(a.nbytes for a in self._feed_stage + self._fetch_stage
                                 if a is not None)
        self.nodes = list(memory.order)
        ws = {s: self.arena[off:off + n] for s, (off, n) in memory.workspace.items()}
        with dev.activate():
            bind_op, array = binder(kind), self._arrays.__getitem__
            self.steps = [bind_op(n.op, list(map(array, map(id, n.inputs))),
                                  list(map(array, map(id, n.outputs))), ws.get(s))
                          for s, n in enumerate(self.nodes)]
        # host mirrors of GPU collectives (MPI works on host memory), see kernels/cuda/dist
        self.staging_bytes += sum(getattr(s, "host_bytes", 0) for s in self.steps)
        # the first step that writes persistent state: a failure before it changes nothing
        self._first_mutation = next((i for i, n in enumerate(self.nodes) if n.op.mutates),
                                    len(self.nodes))
        if poison:
            self._dead = self._dead_regions()
        # run_ready's conditions, and its step calls once they are settled
        self._ready = (kind == "cpu" and not poison and not self._mutates_state and
                       not self._index_checks)
        self._calls = None

    # ------------------------------------------------------------------ binding
    def _bind_arrays(self) -> dict:
        mp = self.memory
        dev = self.device
        groups = mp.groups
        arrays: dict = {}
        for g, root, members in groups.members():
            if groups.persistent(g):
                bound = [self._preset[id(t)] for t in members if id(t) in self._preset]
                if len(bound) > 1:
                    raise GraphError(f"{len(bound)} preset arrays for the storage of "
                                     f"{root.name}, which one buffer holds")
                base = bound[0] if bound else root.data
                if bound and base.shape != root.shape:
                    base = base.reshape(root.shape)
                if base is None:
                    base = dev.zeros(root.shape, root.dtype)
                    self._owned_bytes += root.nbytes
                elif root.device != dev or not dev.is_array(base):
                    raise DeviceError(f"{root.name} lives on {root.device}, but this plan runs "
                                      f"on {dev}; move it with to_device() before compiling")
                if root.data is None and root.creator is None and all(
                        root is not t for t in self.graph.inputs):
                    raise GraphError(f"leaf {root.name} has no data and is not a graph input")
                if isinstance(base, np.ndarray) and not base.flags.c_contiguous:
                    base = np.ascontiguousarray(base)
                buf, off = base.reshape(-1).view(np.uint8), 0
            else:
                buf, off = self.arena, mp.offsets[g]
            if isinstance(buf, np.ndarray):
                # one constructor call per tensor: slicing, viewing and reshaping a region
                # costs twice as much, for every tensor of the plan
                for t in members:
                    arrays[id(t)] = np.ndarray(t.shape, t.dtype, buf, off)
            else:  # a device array
                region = buf[off:off + root.nbytes]
                for t in members:
                    arrays[id(t)] = region[:t.nbytes].view(t.dtype).reshape(t.shape)
        for t in self.graph.inputs:  # an input no node reads still takes (and ignores) a feed
            if id(t) in self._preset:
                arrays[id(t)] = self._preset[id(t)]
            elif id(t) not in arrays:
                arrays[id(t)] = dev.zeros(t.shape, t.dtype)
                self._owned_bytes += t.nbytes
        return arrays

    def _dead_regions(self) -> list[list[np.ndarray]]:
        """For each step, the arena bytes of the buffers (workspace included) whose lifetime
        ends there."""
        dead: list[list[np.ndarray]] = [[] for _ in self.nodes]
        for _, off, size, _, last in self.memory.buffers():
            dead[last].append(self.arena[off:off + size])
        return dead

    # ------------------------------------------------------------------ running
    def _load_feeds(self, feeds) -> None:
        if feeds is None:
            feeds = ()
        if isinstance(feeds, (list, tuple)):
            if len(feeds) != len(self.inputs):
                raise GraphError(f"plan takes {len(self.inputs)} inputs "
                                 f"({', '.join(t.name for t in self.inputs)}), got {len(feeds)}")
            values = list(feeds)
        else:
            values = [None] * len(self.inputs)
            for k, v in dict(feeds).items():
                if isinstance(k, str) and k in self._ambiguous:
                    raise GraphError(f"{len([t for t in self.inputs if t.name == k])} inputs "
                                     f"of this plan are named {k!r}; feed them by Placeholder "
                                     "or as a list in input order")
                i = self._by_name.get(k) if isinstance(k, str) else self._by_id.get(id(k))
                if i is None:
                    raise GraphError(f"{getattr(k, 'name', k)!r} is not an input of this plan; "
                                     f"inputs: {[t.name for t in self.inputs]}")
                values[i] = v
            missing = [t.name for t, v in zip(self.inputs, values) if v is None]
            if missing:
                raise GraphError(f"missing feeds for inputs {missing}")
        dev = self.device
        arrays = []
        for t, v in zip(self.inputs, values):
            a = v if isinstance(v, np.ndarray) else v.data if hasattr(v, "data") else v
            on_device = dev.kind != "cpu" and dev.is_array(a)
            if not on_device:
                a = np.asarray(a)
            if tuple(a.shape) != t.shape:
                raise ShapeError(f"feed for {t.name} has shape {tuple(a.shape)}, expected "
                                 f"{t.shape}")
            if a.dtype != t.dtype and not np.can_cast(a.dtype, t.dtype, "same_kind"):
                raise DTypeError(f"feed for {t.name} has dtype {a.dtype}, expected {t.dtype}")
            if on_device and a.dtype != t.dtype:
                a, on_device = dev.get(a), False  # cast on the host, checked below
            if not on_device:
                check_feed_values(t.name, a, t.dtype, allow_empty=not self._mutates_state)
            arrays.append(a)
        for i, n, reader in self._index_checks:
            a = arrays[i]
            check_indices(f"feed for {self.inputs[i].name}", dev.get(a) if
                          dev.kind != "cpu" and dev.is_array(a) else a, n, reader)
        if dev.kind == "cpu":
            for dst, a in zip(self._feed_arrays, arrays):
                np.copyto(dst, a, casting="same_kind")
            return
        for dst, stage, a in zip(self._feed_arrays, self._feed_stage, arrays):
            if dev.is_array(a):
                dev.copy(dst, a)  # device to device
            else:
                np.copyto(stage, a, casting="same_kind")
                dev.copy(dst, stage)

    def _fetch(self) -> list[np.ndarray]:
        if self.device.kind == "cpu":
            return [a.copy() for a in self._fetch_arrays]
        out = []
        for a, stage in zip(self._fetch_arrays, self._fetch_stage):
            if a.size:
                a.copy_to_host(stage)
            out.append(stage.copy())
        return out

    def run(self, feeds=()) -> list[np.ndarray]:
        """Feed the inputs (a dict keyed by Placeholder or name, or a list in input order),
        run every step, and return copies of the fetched outputs.

        Wrong, missing or unknown feeds, empty batches, class labels out of range and integers
        that would wrap raise before any step runs, so nothing is updated. Should a step still
        fail after an earlier one wrote parameters, buffers or optimizer state,
        :class:`StateUndefinedError` says so. Concurrent calls run one after the other.
        """
        threads.apply()  # Numba keeps its thread count per Python thread
        with self._lock, self.device.activate():
            self._load_feeds(feeds)
            if self.poison:
                self.device.fill(self.arena, 0xFF)  # all-ones bytes: NaN in float32/64
            self._run_steps(self._poisoned_steps() if self.poison else self.steps)
            return self._fetch()

    def run_ready(self, arrays) -> list[np.ndarray]:
        """:meth:`run` for feeds already known to be numpy arrays of exactly the inputs'
        shapes and dtypes, in input order (Model's inference hot path checks that): such a
        feed needs no conversion, and no value of the input's own dtype can wrap. Plans
        that need more than the copy (a GPU plan, one that writes state, checks class
        labels or poisons its arena) take :meth:`run`. The steps run as their bare calls
        (``step.direct``, see kernels/cpu/loops.bound) once every call is settled.

        Small models lose time to the Python around the steps, whose code and data the
        kernels evict: mnasnet0_5 (batch 2, two threads) spent 75 us of a 0.8 ms call
        outside its steps and 1 us a step on top of each kernel. Taking out the generic
        feed handling and each step's own frame made its calls 2.7-3% faster."""
        if not self._ready:
            return self.run(arrays)
        threads.apply()
        with self._lock:
            for dst, a in zip(self._feed_arrays, arrays):
                np.copyto(dst, a)
            calls = self._calls or self._settle_calls()
            if calls is None:
                self._run_steps(self.steps)
            else:
                for fn, args in calls:
                    fn(*args)
            return self._fetch()

    def _settle_calls(self):
        """The steps' bare calls, or None while a step has still to settle its own."""
        calls = []
        for step in self.steps:
            direct = getattr(step, "direct", False)
            if direct is None:
                return None
            calls.append(direct or (step, ()))
        self._calls = calls
        return calls

    def run_bound(self) -> None:
        """Run every step on the values already in the bound input arrays, leaving the
        results in the bound output arrays: no feed checks, copies or locking (what a
        control-flow op calls for its body, whose arrays it bound with ``preset``)."""
        for step in self.steps:
            step()

    def _run_steps(self, steps) -> None:
        i = 0
        try:
            for i, step in enumerate(steps):
                step()
            self.device.synchronize()  # a GPU reports a failed kernel here, not at launch
        except Exception as e:
            if i < self._first_mutation:  # nothing persistent written yet
                raise
            raise StateUndefinedError(
                f"step {i} ({self.nodes[i].name}, {self.nodes[i].type}) failed after earlier "
                f"steps had updated parameters, buffers or optimizer state, so that state is "
                f"now undefined (reload a checkpoint): {type(e).__name__}: {e}") from e

    def _poisoned_steps(self) -> list:
        """The steps, each followed by filling the arena regions that die there with NaN."""
        def poisoned(step, dead):
            def run():
                step()
                for region in dead:
                    fill(region, 0xFF)
            return run

        fill = self.device.fill

        return [poisoned(step, dead) for step, dead in zip(self.steps, self._dead)]

    def refresh_folded(self, version=None) -> None:
        """Recompute the constants folded from parameters when the plan was compiled (the
        BatchNorms folded into convolutions), from the parameters' current values. Call it
        after changing parameters in place by hand (``p.data[...] = ...``) before running a
        plan directly. With ``version`` (a count its caller moves whenever parameters may
        change without the Tensor API seeing it, as Model does for training steps before
        each run) it recomputes only when that count moved or a parameter was assigned or
        copied into through the Tensor API (``Tensor.writes``)."""
        if not self.folds:
            return
        writes = self._source_writes()
        if version is not None and version == self._folded_version and \
                writes == self._fold_writes:
            return
        self._folded_version, self._fold_writes = version, writes
        with self._lock, self.device.activate():
            for f in self.folds:
                f.refresh()

    def _source_writes(self) -> int:
        return sum(map(_WRITES, self._fold_sources))

    # ------------------------------------------------------------------ reports
    def memory_report(self) -> dict:
        """What the plan holds, in bytes: the arena (every transient buffer and all kernel
        workspace), its live-bytes lower bound and no-reuse total, the persistent bytes
        (parameters, state, inputs, outputs), the persistent buffers the plan allocated
        itself or whose creation its tracing caused (input/output buffers, optimizer state
        such as momentum: ``owned_persistent_bytes``) and ``plan_bytes``, arena plus those:
        every byte that exists because this plan was built. ``workspace_by_op`` and
        ``kept_for_backward_by_op`` say which ops the arena holds it for (see
        :meth:`~singa_graph.passes.memory.MemoryPlan.breakdown`)."""
        r = self.memory.report()
        r.update(self.memory.breakdown())
        r["owned_persistent_bytes"] = self._owned_bytes + self.created_state_bytes
        r["folded_bytes"] = sum(f.nbytes for f in self.folds)  # included in the line above
        r["plan_bytes"] = self.arena.nbytes + r["owned_persistent_bytes"]
        r["device"] = str(self.device)
        r["host_staging_bytes"] = self.staging_bytes  # page-locked host buffers (GPU plans)
        return r

    def profile(self, feeds=(), repeat: int = 10) -> "Profile":
        """Run ``repeat`` times, timing every step; returns a :class:`Profile`. On a GPU
        each step is followed by a device synchronisation, so its time is its own (and the
        total exceeds a plain run's by the launch latency that synchronising exposes)."""
        with self._lock, self.device.activate():
            return self._profile(feeds, repeat)

    def _profile(self, feeds, repeat):
        self._load_feeds(feeds)
        times = np.zeros((repeat, len(self.steps)))
        clock = time.perf_counter
        sync = self.device.synchronize
        sync()
        for r in range(repeat):
            for i, step in enumerate(self.steps):
                t0 = clock()
                step()
                sync()
                times[r, i] = clock() - t0
        ws = {s: b for s, (_, b) in self.memory.workspace.items()}
        self.last_profile = Profile(self.nodes, np.median(times, axis=0),
                                    [ws.get(i, 0) for i in range(len(self.nodes))])
        return self.last_profile

    def __repr__(self):
        return (f"ExecutionPlan({len(self.steps)} steps, arena {self.memory.arena_bytes} B, "
                f"schedule {self.memory.schedule!r})")


class ProfileRow(NamedTuple):
    """One node of a :class:`Profile`."""

    name: str
    type: str
    seconds: float
    workspace: int
    flops: float


class Profile:
    """Median time per node of a plan, with tables like SINGA's PrintTimeProfiling; GEMM-like
    nodes (convolutions and their gradients, matmuls) also show GFLOP/s, and every node the
    workspace its kernel chose."""

    def __init__(self, nodes, seconds, workspace=None):
        workspace = workspace or [0] * len(nodes)
        self.rows = sorted((ProfileRow(n.name, n.label, float(s), int(w), flops(n))
                            for n, s, w in zip(nodes, seconds, workspace)),
                           key=lambda r: -r.seconds)
        by_type: dict[str, list] = defaultdict(lambda: [0, 0.0])
        for _, t, s, _, _ in self.rows:
            by_type[t][0] += 1
            by_type[t][1] += s
        self.by_type = sorted(((t, c, s) for t, (c, s) in by_type.items()), key=lambda r: -r[2])
        self.total = float(np.sum(seconds))

    def table(self, top: int = 20) -> str:
        lines = [f"total {self.total * 1e3:.3f} ms per run",
                 f"{'op type':<24}{'count':>7}{'ms':>10}{'%':>7}"]
        for t, c, s in self.by_type:
            lines.append(f"{t:<24}{c:>7}{s * 1e3:>10.3f}{100 * s / max(self.total, 1e-12):>7.1f}")
        lines.append(f"\n{'node':<32}{'op type':<24}{'ms':>10}{'GFLOP/s':>9}{'ws KiB':>9}")
        for name, t, s, ws, f in self.rows[:top]:
            rate = f"{f / max(s, 1e-12) / 1e9:>9.1f}" if f else f"{'':>9}"
            lines.append(f"{name:<32}{t:<24}{s * 1e3:>10.3f}{rate}{ws / 1024:>9.0f}")
        return "\n".join(lines)

    def __str__(self):
        return self.table()



def flops(node) -> float:
    """Multiply-adds x 2 of a convolution (or one of its gradients) or a matmul; 0 else."""
    t = node.type
    count = getattr(node.op, "multiply_adds", None)  # Conv2d, its tiled forms, MatMulDirect
    if count is not None and len(node.inputs) >= 2:
        return 2.0 * count(node.inputs[0].shape, node.inputs[1].shape, node.outputs[0].shape)
    if t in ("Conv2dGradInput", "Conv2dGradWeight"):
        w = node.inputs[1].shape if t != "Conv2dGradWeight" else node.outputs[0].shape
        y = node.inputs[0].shape  # dy
        o, cg, kh, kw = w
        return 2.0 * y[0] * o * cg * kh * kw * y[2] * y[3]
    if t in ("MatMul", "Gemm"):
        y = node.outputs[0].shape
        a = node.inputs[0].shape
        k = a[-2] if getattr(node.op, "trans_a", False) else a[-1]
        return 2.0 * float(np.prod(y)) * k
    return 0.0
