"""Rematerialisation: meet a memory budget by computing some values twice.

:func:`rematerialize` chooses forward values to drop after their early (forward) uses and
to compute again just before their late (backward) uses, and rewrites the graph: every
recomputation is a *recompute node*, a clone of the forward node that reads the values held
at that time (or other clones), and the later readers of the value read the clone's
output instead. The rewritten graph then goes through the usual schedule and memory plan,
and ``verify`` checks it like any other.

Clones compute what the original computed, bit for bit: the same op and kernel on the same
input values (no op reads state that changes in between: the search never lets a clone run
after an optimizer update of what it reads). Ops that draw random numbers (Dropout) are
never cloned, so their outputs (Dropout's mask included) are kept. A training BatchNorm's
clone recomputes the batch statistics and writes its running statistics into scratch
tensors of its own, so the real running statistics are updated once.

Which values go (see :mod:`.remat_search` and :mod:`.remat_milp`):

* ``'milp'``: the exact optimum of Checkmate's integer program (Jain et al., MLSys 2020),
  by SciPy's HiGHS within a time limit, for graphs of up to ``MILP_MAX_STEPS`` steps;
* ``'dtr'``: a heuristic for any size, evicting by ``cost / (bytes x time to next use)``;
* ``'chen'``: Chen et al.'s ``sqrt(n)`` checkpoints, the classic baseline (no budget);
* ``'auto'`` (the default): ``'milp'`` where the graph is small enough, else ``'dtr'``.

The budget counts the arena: every transient buffer and every kernel workspace (and, under
DistOpt, the all-reduce buckets, which live in the arena). Below the smallest budget the
search reaches (:func:`minimum_budget`), :class:`MemoryBudgetError` names that minimum.
"""
from __future__ import annotations

import itertools
import re
from collections import defaultdict

from ..errors import MemoryBudgetError
from ..ir.node import Node
from ..ir.tensor import Tensor
from .liveness import StorageGroups
from .memory import plan_memory, workspace_sizes
from .placement import ALIGN
from .remat_search import Infeasible, Problem, chen_drops, simulate

METHODS = ("auto", "milp", "dtr", "chen")
MILP_MAX_STEPS = 60  # the integer program has about steps^2 binaries
RETRIES = 3  # tighter simulated budgets tried when placement overshoots the budget

_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "kib": 1 << 10,
          "mib": 1 << 20, "gib": 1 << 30, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_budget(spec, reference: int | None = None) -> int:
    """Bytes from a budget: an integer, a string with a unit (``"64MiB"``, ``"1.5GB"``,
    ``"4096"``) or a percentage of ``reference`` (``"50%"``: half the arena of the plan
    without a budget)."""
    if isinstance(spec, bool):
        raise MemoryBudgetError(f"memory budget must be bytes or a string, got {spec!r}")
    if isinstance(spec, (int, float)):
        value = spec
    elif isinstance(spec, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z%]*)\s*", spec)
        unit = m.group(2).lower() if m else None
        if m is None or (unit not in _UNITS and unit != "%"):
            raise MemoryBudgetError(f"memory budget {spec!r} is not bytes, a size such as "
                                    "'64MiB' or a percentage such as '50%'")
        if unit == "%":
            if reference is None:
                raise MemoryBudgetError(f"memory budget {spec!r} is relative, but there is "
                                        "no plan without a budget to take it of")
            value = float(m.group(1)) / 100.0 * reference
        else:
            value = float(m.group(1)) * _UNITS[unit]
    else:
        raise MemoryBudgetError(f"memory budget must be bytes or a string, got "
                                f"{type(spec).__name__}")
    if not value > 0 or value != value or value == float("inf"):
        raise MemoryBudgetError(f"memory budget must be a positive number of bytes, got "
                                f"{spec!r}")
    return int(value)


def _mib(n) -> str:
    return f"{n / (1 << 20):.3f} MiB ({int(n)} bytes)"


class _Rewrite:
    """Recompute nodes for a list of events, applied to the graph and undone if rejected."""

    def __init__(self, graph, order):
        self.graph, self.order = graph, list(order)
        self.nodes = list(graph.nodes)
        self.saved: list[tuple] = []
        self.clones: dict[int, object] = {}
        self.scratch_bytes = 0

    def apply(self, events) -> list:
        stage = defaultdict(list)
        for t, s in events:
            stage[t].append(s)
        latest: dict[int, Tensor] = {}
        new, count = [], itertools.count()
        for t, node in enumerate(self.order):
            for s in stage.get(t, ()):
                u = self.order[s]
                c = self._clone(u, [latest.get(id(x), x) for x in u.inputs], next(count))
                latest.update((id(o), co) for o, co in zip(u.outputs, c.outputs))
                self.clones[c.id] = u
                new.append(c)
            ins = [latest.get(id(x), x) for x in node.inputs]
            if any(a is not b for a, b in zip(ins, node.inputs)):
                self.saved.append((node, node.inputs))
                node.inputs = ins
            new.append(node)
        self.graph.nodes = new
        return new

    def _clone(self, u, ins, k):
        if u.type == "BatchNorm2d" and u.op.mutates:
            # scratch running statistics: the real ones are written by the forward only
            ins = ins[:3] + [Tensor(x.shape, device=x.device, dtype=x.dtype,
                                    requires_grad=False, name=f"{x.name}.scratch{k}")
                             for x in ins[3:5]]
            self.scratch_bytes += sum(x.nbytes for x in ins[3:5])
        c = Node(u.op, ins, name=f"{u.name}.recompute{k}")
        c.scope = u.scope
        for o in u.outputs:
            c.outputs.append(Tensor.symbolic(o.shape, o.dtype, o.device, creator=c,
                                             name=f"{o.name}.recompute{k}"))
        return c

    def undo(self) -> None:
        for node, ins in reversed(self.saved):
            node.inputs = ins
        self.graph.nodes = self.nodes
        self.saved, self.clones, self.scratch_bytes = [], {}, 0


def _arena(graph, device) -> int:
    return plan_memory(graph, graph.nodes, device=device).arena_bytes


class _Search:
    """One graph and order: trials of event lists through the real memory planner."""

    def __init__(self, graph, order, device):
        self.graph, self.order, self.device = graph, list(order), device
        groups = StorageGroups(graph)
        self.prob = Problem(graph, self.order, groups,
                            workspace_sizes(self.order, device) if device else {})
        self.base_arena = plan_memory(graph, self.order, device=device,
                                      base=groups).arena_bytes

    def trial(self, events, budget=None):
        """``(arena, rewrite)`` of ``events`` applied; undone unless within ``budget``."""
        rw = _Rewrite(self.graph, self.order)
        rw.apply(events)
        arena = _arena(self.graph, self.device)
        if budget is not None and arena > budget:
            rw.undo()
            return arena, None
        return arena, rw

    def dtr(self, budget):
        """The heuristic's events within ``budget`` (tightening the simulated budget when
        placement overshoots it), or None."""
        target = budget
        for _ in range(RETRIES + 1):
            try:
                events, _ = simulate(self.prob, target)
            except Infeasible:
                return None
            arena, rw = self.trial(events, budget)
            if rw is not None:
                rw.undo()
                return events
            target -= arena - budget + ALIGN
        return None

    def minimum(self):
        """``(smallest arena reached, its events)``: the smallest simulated budget the
        heuristic meets, found by bisection, then planned for real."""
        def feasible(b):
            try:
                return simulate(self.prob, b)[0]
            except Infeasible:
                return None

        lo, hi, best = 0, self.base_arena, []
        while hi - lo > max(ALIGN, hi // 500):
            mid = (lo + hi) // 2
            ev = feasible(mid)
            if ev is None:
                lo = mid
            else:
                hi, best = mid, ev
        arena, rw = self.trial(best)
        rw.undo()
        return min(arena, self.base_arena) if best else self.base_arena, best


def _order_of(graph, schedule):
    if isinstance(schedule, str) or schedule is None:
        from .schedule import schedule as _schedule

        return _schedule(graph, schedule or "memory")
    return list(schedule)


class _Orders:
    """The search from the given order and, lazily, from the memory policy's other
    candidate orders (the order with the lowest peak is not always the one recomputation
    brings lowest: a depth-first order finishes a block's backward before the next)."""

    def __init__(self, graph, order, device):
        self.graph, self.device = graph, device
        self.first = _Search(graph, order, device)
        self._all = None
        self._least = {}

    def searches(self):
        if self._all is None:
            from .schedule import candidate_orders

            self._all = [self.first]
            seen = {tuple(map(id, self.first.order))}
            for o in candidate_orders(self.graph):
                if tuple(map(id, o)) not in seen:
                    seen.add(tuple(map(id, o)))
                    self._all.append(_Search(self.graph, o, self.device))
        return self._all

    def least(self, search):
        k = id(search)
        if k not in self._least:
            self._least[k] = search.minimum()
        return self._least[k]

    def minimum(self):
        """``(smallest arena over the candidate orders, its search, its events)``."""
        best = None
        for s in self.searches():
            least, events = self.least(s)
            if best is None or least < best[0]:
                best = (least, s, events)
        return best


def minimum_budget(graph, schedule="memory", device: str | None = "cpu") -> int:
    """The smallest arena (bytes, workspace included) that :func:`rematerialize` can fit
    ``graph`` in, starting from ``schedule`` (an order of its nodes, or a policy name)."""
    return _Orders(graph, _order_of(graph, schedule), device).minimum()[0]


def rematerialize(graph, schedule, budget, method: str = "auto",
                  device: str | None = "cpu", time_limit: float = 10.0):
    """Rewrite ``graph`` in place so that its plan's arena fits ``budget`` bytes; returns it.

    Args:
        graph: a complete training (or any) graph, after fusion.
        schedule: the order it would run in without a budget (a list of its nodes), or a
            schedule policy name.
        budget: bytes (or a string for :func:`parse_budget`); None only with ``'chen'``.
        method: ``'auto'``, ``'milp'``, ``'dtr'`` or ``'chen'`` (see the module docstring).
        device: the kernel table whose workspace declarations count (``'cpu'``, ``'cuda'``).
        time_limit: seconds the MILP solver may take.

    ``graph.nodes`` becomes the order to run (recompute nodes just before their readers);
    ``graph.recomputed`` maps each recompute node's id to the node it clones. Raises
    :class:`MemoryBudgetError`, naming the smallest feasible budget, and leaves the graph
    as it was, when the budget is below it.
    """
    if method not in METHODS:
        raise ValueError(f"unknown rematerialisation method {method!r}; choose one of "
                         f"{METHODS}")
    order = _order_of(graph, schedule)
    orders = _Orders(graph, order, device)
    search = orders.first
    if budget is not None:
        budget = parse_budget(budget, search.base_arena)
    graph.recomputed, graph.remat_scratch_bytes = {}, 0
    if method == "chen":
        events, _ = simulate(search.prob, policy="chen", drops=chen_drops(search.prob),
                             cap=len(order) * len(order))
        return _keep(graph, search, events, budget)
    if budget is None:
        raise MemoryBudgetError(f"method {method!r} needs a memory budget")
    if search.base_arena <= budget:
        return graph
    least, least_events = orders.least(search)
    if budget < least:  # another candidate order may go lower
        least, search, least_events = orders.minimum()
        if budget < least:
            raise MemoryBudgetError(
                f"memory budget {_mib(budget)} is below the smallest arena this graph can "
                f"be planned in, recomputing values: {_mib(least)} (without recomputation: "
                f"{_mib(orders.first.base_arena)})", minimum=least)
    events = None
    if method in ("milp", "auto") and (method == "milp" or len(order) <= MILP_MAX_STEPS):
        from .remat_milp import solve

        events = solve(search.prob, budget, time_limit)
        if events is not None:
            rw = search.trial(events, budget)[1]
            if rw is None:
                events = None
            else:
                rw.undo()
    if events is None and method != "milp":
        events = search.dtr(budget)
    if events is None:
        events = least_events  # fits: least <= budget
    return _keep(graph, search, events, budget)


def _keep(graph, search, events, budget):
    arena, rw = search.trial(events, budget)
    if rw is None:
        raise MemoryBudgetError(f"the recomputation found needs an arena of {_mib(arena)}, "
                                f"over the budget of {_mib(budget)}")
    graph.recomputed = dict(rw.clones)
    graph.remat_scratch_bytes = rw.scratch_bytes
    return graph
