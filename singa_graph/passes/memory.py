"""Static memory planning: one arena per device, an offset for every transient buffer.

Given an order, :class:`~singa_graph.passes.liveness.StorageGroups` decides aliases and
in-place reuse; each remaining transient group has a lifetime interval and a size. Offsets
come from :func:`~singa_graph.passes.placement.place`, which takes any hashable keys with a
size and an interval (an O(n log n) sweep over lifetimes, plus greedy first-fit searches
while the graph is small) and stops once the arena reaches the live-bytes lower bound.

Kernel workspace (scratch a kernel declares for its shapes, see
:mod:`singa_graph.runtime.registry`) is placed the same way: a buffer that lives for exactly
its own step, so the workspaces of different steps share bytes with each other and with
every buffer that is dead at that step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .liveness import StorageGroups, live_profile
from .placement import ALIGN, place  # noqa: F401  (ALIGN: re-exported for the planner's users)
from .placement import align as _align


@dataclass
class MemoryPlan:
    """Where every tensor of a compiled graph lives.

    Attributes:
        order: the execution order (nodes).
        groups: the storage groups (aliases and in-place merges).
        offsets: ``group -> byte offset`` in the arena, for transient groups.
        intervals: ``group -> (first step, last step)`` for transient groups.
        arena_bytes: the arena's size.
        lower_bound: the live-bytes peak of this order (no placement can do better).
        no_reuse_bytes: the sum of all transient buffers (64-byte aligned) if none shared memory.
        persistent_bytes: inputs, parameters, optimizer state, constants and outputs.
        schedule: the policy name that produced ``order``.
        workspace: ``step -> (byte offset, bytes)`` of the kernel scratch of that step.
        budget: the memory budget the arena was planned to fit (bytes), or None.
        unbudgeted_arena: the arena of the plan without that budget (bytes), or None.
    """

    order: list
    groups: StorageGroups
    offsets: dict
    intervals: dict
    arena_bytes: int
    lower_bound: int
    no_reuse_bytes: int
    persistent_bytes: int
    schedule: str = ""
    inplace: bool = True
    profile: list = field(default_factory=list)
    workspace: dict = field(default_factory=dict)
    budget: int | None = None
    unbudgeted_arena: int | None = None
    outputs: list = field(default_factory=list)  # the graph's outputs (for breakdown)

    def recomputed(self) -> dict:
        """``id(recompute node) -> the node it clones`` (see :mod:`.remat`)."""
        return getattr(self.groups.graph, "recomputed", {}) or {}

    def report(self) -> dict:
        """The plan's figures as a dict (bytes; ``recompute_flops`` is the share of the
        step's FLOPs spent on recompute nodes)."""
        from .cost import flops

        rec = self.recomputed()
        total = sum(flops(n) for n in self.order)
        again = sum(flops(n) for n in self.order if n.id in rec)
        return {
            "schedule": self.schedule,
            "arena_bytes": self.arena_bytes,
            "lower_bound_bytes": self.lower_bound,
            "no_reuse_bytes": self.no_reuse_bytes,
            "persistent_bytes": self.persistent_bytes,
            "arena_over_lower_bound": self.arena_bytes / max(self.lower_bound, 1),
            "arena_over_no_reuse": self.arena_bytes / max(self.no_reuse_bytes, 1),
            "steps": len(self.order),
            "inplace_ops": len(self.groups.inplace_pairs),
            "workspace_peak_bytes": max((b for _, b in self.workspace.values()), default=0),
            "workspace_no_reuse_bytes": sum(_align(b) for _, b in self.workspace.values()),
            "workspace_steps": len(self.workspace),
            "budget_bytes": self.budget,
            "unbudgeted_arena_bytes": (self.arena_bytes if self.unbudgeted_arena is None
                                       else self.unbudgeted_arena),
            "recomputed_nodes": len(rec),
            "recompute_flops": again / total if total else 0.0,
        }

    def breakdown(self) -> dict:
        """Where the arena goes, by op type: ``workspace_by_op`` (the largest workspace a
        step of that type holds) and ``kept_for_backward_by_op`` (the bytes of buffers a
        forward node of that type writes and the backward reads, so they live from one to
        the other: the activations training keeps), with their total
        ``kept_for_backward_bytes``. "Forward" is what the graph's outputs other than
        optimizer updates depend on, as the pictures draw it."""
        order = self.order
        outputs = getattr(self, "outputs", None) or []
        forward = _ancestors([t for t in outputs if t.creator is not None
                              and not t.creator.op.run_asap])
        ws: dict = {}
        for s, (_, b) in self.workspace.items():
            t = order[s].type
            ws[t] = max(ws.get(t, 0), b)
        kept: dict = {}
        for g, (a, b) in self.intervals.items():
            if order[a].id in forward and order[b].id not in forward:
                t = order[a].type
                kept[t] = kept.get(t, 0) + self.groups.size(g)
        return {"workspace_by_op": dict(sorted(ws.items())),
                "kept_for_backward_bytes": sum(kept.values()),
                "kept_for_backward_by_op": dict(sorted(kept.items(), key=lambda kv: -kv[1]))}

    def buffers(self):
        """Every arena buffer as ``(key, offset, bytes, first step, last step)``: storage
        groups keyed by their root tensor id, workspace keyed by ``('workspace', step)``."""
        for g, (a, b) in self.intervals.items():
            yield g, self.offsets[g], self.groups.size(g), a, b
        for s, (off, n) in self.workspace.items():
            yield ("workspace", s), off, n, s, s


def workspace_sizes(order, device: str = "cpu") -> dict[int, int]:
    """``step -> scratch bytes`` its kernel declares on ``device`` (steps needing none are
    left out)."""
    from ..runtime.registry import workspace_bytes

    sizes = {}
    for s, n in enumerate(order):
        b = workspace_bytes(n.op, n.inputs, n.outputs, device)
        if b:
            sizes[s] = b
    return sizes


def plan_memory(graph, order, schedule: str = "", inplace: bool = True,
                device: str | None = "cpu", base: StorageGroups | None = None) -> MemoryPlan:
    """Decide aliases, in-place reuse and arena offsets for ``graph`` run in ``order``.

    ``device`` is the kernel table whose workspace declarations are planned (None plans
    none: a graph-only analysis). ``base``: a ``StorageGroups(graph)`` to start from (the
    memory schedule has made one already)."""
    groups = StorageGroups(graph, order, inplace=inplace, base=base)
    ws = workspace_sizes(order, device) if device is not None else {}
    intervals, sizes = groups.lifetimes(order)
    intervals.update({("workspace", s): (s, s) for s in ws})
    sizes.update({("workspace", s): b for s, b in ws.items()})
    prof = live_profile(sizes, intervals, len(order))
    offsets, arena = place(sizes, intervals)
    no_reuse = groups.no_reuse_bytes(_align) + sum(_align(b) for b in ws.values())
    persistent = sum(groups.size(g) for g in groups.persistent_groups())
    workspace = {s: (offsets.pop(("workspace", s)), b) for s, b in ws.items()}
    for s in ws:
        del intervals[("workspace", s)]
    return MemoryPlan(order=list(order), groups=groups, offsets=offsets, intervals=intervals,
                      arena_bytes=arena, lower_bound=max(prof, default=0),
                      no_reuse_bytes=no_reuse, persistent_bytes=persistent,
                      schedule=schedule, inplace=inplace, profile=prof, workspace=workspace,
                      outputs=list(graph.outputs))


def _ancestors(tensors) -> set:
    """Ids of the nodes that ``tensors`` depend on."""
    seen: set = set()
    stack = [t.creator for t in tensors if t.creator is not None]
    while stack:
        n = stack.pop()
        if n.id not in seen:
            seen.add(n.id)
            stack.extend(x.creator for x in n.inputs if x.creator is not None)
    return seen
