"""The pipeline: Graph + options -> ExecutionPlan."""
from __future__ import annotations

import contextlib
import gc
import threading

from .fuse import fuse as _fuse
from .inference import is_inference_graph, optimize_for_inference
from .liveness import StorageGroups
from .memory import plan_memory
from .recompute import recompute_cheap
from .schedule import schedule as _schedule

_gc_lock = threading.Lock()
_gc_paused = {"depth": 0, "was_enabled": False}


@contextlib.contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector while a graph is traced and compiled.

    Compiling creates hundreds of thousands of small objects that stay alive, and every
    generation-2 collection walks all of them: with the collector on, compile time of deep
    graphs grows faster than linearly. Compiling makes few reference cycles, so pausing the
    collector costs no memory worth mentioning. Nested and concurrent uses share one pause;
    a collector the user disabled stays disabled.

    When the pause ends, every object made during it is still in the youngest generation,
    and the first collection after it would walk them all (the whole graph and plan, a
    cost growing faster than the graph: cache misses) only to find them alive and move
    them up. :func:`_promote_all` moves them to the oldest generation at once instead.
    """
    with _gc_lock:
        if _gc_paused["depth"] == 0:
            _gc_paused["was_enabled"] = gc.isenabled()
            gc.disable()
        _gc_paused["depth"] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_paused["depth"] -= 1
            if _gc_paused["depth"] == 0 and _gc_paused["was_enabled"]:
                _promote_all()
                gc.enable()


def _promote_all() -> None:
    """Move every object the collector tracks to its oldest generation, without a scan:
    ``gc.freeze()`` moves them all to the permanent generation and ``gc.unfreeze()`` puts
    them back into the oldest one (both splice lists). Young garbage cycles are then found
    by the next full collection rather than the next young one. Skipped when the program
    froze objects itself (for copy-on-write after fork): unfreezing would undo that."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def compile(graph, schedule: str = "memory", device=None, fetches=None, poison: bool = False,
            inplace: bool = True, validate: bool = True, fuse: bool = True,
            inference: bool | None = None, memory_budget=None, remat: str = "auto",
            recompute: bool = True, weight_copies: bool = True):
    """Schedule ``graph``, plan its memory and bind kernels.

    Args:
        graph: a Graph whose outputs include everything that must run (losses, update
            tokens); autodiff and optimizer passes have already added their nodes.
        schedule: ``'sequential'``, ``'topological'`` or ``'memory'``.
        device: where to run; the device of the graph's inputs by default.
        fetches: the tensors ``run`` returns (default: all graph outputs).
        poison: fill dead arena regions with NaN after every step (debugging).
        inplace: let elementwise ops overwrite inputs that die at them.
        fuse: fold ReLUs into the convolution / batch norm before them and ReLU backwards
            into the batch norm backward after them (see :mod:`.fuse`); rewrites ``graph``.
        inference: run the inference passes (:mod:`.inference`: drop no-ops, fold eval
            BatchNorms into convolutions, fuse convolution epilogues) before ``fuse``.
            None (the default) runs them when the graph computes no gradient and writes no
            state; training plans keep their BatchNorms. Needs ``fuse``.
        memory_budget: bytes (or ``"64MiB"``, ``"50%"`` of the unbudgeted arena) that the
            arena, workspace included, must fit; values are recomputed to meet it
            (:mod:`.remat`), or :class:`~singa_graph.errors.MemoryBudgetError` names the
            smallest feasible budget.
        remat: the recomputation search: ``'auto'``, ``'milp'``, ``'dtr'`` or ``'chen'``
            (Chen et al.'s sqrt(n) checkpoints, applied even without a budget).
        recompute: with ``fetches``, let the backward recompute cheap elementwise results
            whose input it keeps anyway, rather than keep them too (:mod:`.recompute`).
        weight_copies: let the inference passes hold weights in the layouts of their
            faster kernels, in plan-owned copies beside the parameters (``memory_report()``'s
            ``folded_bytes``); False keeps one copy of every weight (see
            :func:`~.inference.optimize_for_inference`).

    Plans run under the process-wide thread policy of :mod:`singa_graph.runtime.threads`.
    """
    from ..runtime.plan import ExecutionPlan

    with gc_paused():
        memory, device = plan_graph(graph, schedule, device, inplace, validate, fuse, inference,
                                    memory_budget, remat, fetches, recompute, weight_copies)
        return ExecutionPlan(graph, memory, fetches=fetches, device=device, poison=poison)


def plan_graph(graph, schedule: str = "memory", device=None, inplace: bool = True,
               validate: bool = True, fuse: bool = True, inference: bool | None = None,
               memory_budget=None, remat: str = "auto", fetches=None,
               recompute: bool = True, weight_copies: bool = True):
    """:func:`compile` up to the memory plan, without binding: ``(MemoryPlan, device)``.
    Control-flow ops plan their bodies so and bind them into their own workspace."""
    with gc_paused():
        if validate:
            graph.validate()
        infer_only = inference or (inference is None and is_inference_graph(graph))
        if recompute and fetches is not None and not infer_only:
            recompute_cheap(graph, fetches)
        if device is None and graph.inputs:
            device = graph.inputs[0].device
        kind = device.kind if device is not None else "cpu"
        if fuse:
            if infer_only:
                optimize_for_inference(graph, kind, weight_copies)
            _fuse(graph)
        base = StorageGroups(graph)  # aliases and persistence: shared by schedule and plan
        order = _schedule(graph, schedule, base=base)
        memory = plan_memory(graph, order, schedule=schedule, inplace=inplace, device=kind,
                             base=base)
        if memory_budget is not None or remat == "chen":
            memory = _budgeted(graph, order, memory, memory_budget, remat, schedule, inplace,
                               kind)
        return memory, device


def _budgeted(graph, order, memory, budget, method, schedule, inplace, kind):
    """The memory plan of ``graph`` rewritten to fit ``budget`` (:mod:`.remat`): scheduled
    by ``schedule`` again, or in the rewritten order itself if that one fits better."""
    from .remat import parse_budget, rematerialize

    unbudgeted = memory.arena_bytes
    if budget is not None:
        budget = parse_budget(budget, unbudgeted)
    if budget is None or memory.arena_bytes > budget:
        rematerialize(graph, order, budget, method=method, device=kind)
        base = StorageGroups(graph)
        memory = plan_memory(graph, _schedule(graph, schedule, base=base), schedule=schedule,
                             inplace=inplace, device=kind, base=base)
        if budget is not None and memory.arena_bytes > budget:
            # the search planned the rewritten order itself: that one fits
            memory = plan_memory(graph, list(graph.nodes), schedule="remat", inplace=inplace,
                                 device=kind, base=base)
    memory.budget = budget
    memory.unbudgeted_arena = unbudgeted
    return memory
