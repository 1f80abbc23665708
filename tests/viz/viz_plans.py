"""What the picture tests expect of a plan, computed from its MemoryPlan directly."""
from __future__ import annotations


def workspaces(plan) -> dict:
    """``step -> (offset, bytes)`` of the plan's kernel workspaces (none on older plans)."""
    return dict(getattr(plan.memory, "workspace", None) or {})


def expected_buffers(plan) -> int:
    return len(plan.memory.intervals) + len(workspaces(plan))


def expected_live(plan) -> list[int]:
    """Live arena bytes per step, from the memory plan's own intervals and workspaces."""
    mp = plan.memory
    live = [0] * len(plan.nodes)
    for g, (a, b) in mp.intervals.items():
        for s in range(a, b + 1):
            live[s] += mp.groups.size(g)
    for s, (_, nbytes) in workspaces(plan).items():
        live[s] += nbytes
    return live
