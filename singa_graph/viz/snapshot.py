"""The plan as a memory snapshot in the pickle format of PyTorch's memory visualiser.

``torch.cuda.memory._dump_snapshot`` writes a dict with ``segments`` (the allocator's memory
at the end, block by block) and ``device_traces`` (one list of ``alloc`` / ``free_requested``
/ ``free_completed`` / ``segment_alloc`` events per device). We write the same structure
for one training step: a segment for the arena, whose buffers are allocated at their first
step and freed after their last one, and a segment holding the persistent buffers (inputs,
parameters, state, outputs), which stay allocated. Each event's stack frame names the step
and node. Users open the file at https://pytorch.org/memory_viz or with the helpers in
``torch.cuda._memory_viz``; torch is not needed to write it.
"""
from __future__ import annotations

import pickle

from .extract import View

ARENA_ADDRESS = 0x7F0000000000  # made-up device addresses; only differences matter
PERSISTENT_ADDRESS = 0x7E0000000000
ALIGN = 512  # PyTorch's caching allocator rounds to 512 bytes; we keep our own layout


def _frames(view: View, step: int) -> list[dict]:
    node = view.schedule[step]
    op = next((n.op for n in view.nodes if n.name == node), "")
    return [{"filename": f"{view.name} plan", "line": step, "name": f"step {step}: {node} "
             f"({op})"}]


def _block(address, size, state, frames=(), requested=None):
    return {"address": address, "size": int(size),
            "requested_size": int(size if requested is None else requested),
            "state": state, "frames": list(frames)}


def _segment(address, blocks, total):
    active = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {"device": 0, "address": address, "total_size": int(total),
            "allocated_size": active, "active_size": active, "requested_size": active,
            "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": blocks}


def to_snapshot(view: View) -> dict:
    """The snapshot dict of ``view`` (a plan's view): ``segments`` and ``device_traces``."""
    if not view.schedule:
        raise ValueError("a memory snapshot needs a plan, not a bare Graph")
    arena = max(view.arena_bytes, 1)
    trace = [{"action": "segment_alloc", "addr": ARENA_ADDRESS, "size": arena, "stream": 0,
              "frames": [], "time_us": 0}]
    starts: dict[int, list] = {}
    ends: dict[int, list] = {}
    for b in view.buffers:
        starts.setdefault(b.first, []).append(b)
        ends.setdefault(b.last, []).append(b)
    for step in range(len(view.schedule)):
        frames = _frames(view, step)
        for b in starts.get(step, ()):
            trace.append({"action": "alloc", "addr": ARENA_ADDRESS + b.offset, "size": b.size,
                          "stream": 0, "frames": frames, "time_us": 2 * step,
                          "category": "workspace" if b.workspace else b.role})
        for b in ends.get(step, ()):
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": ARENA_ADDRESS + b.offset,
                              "size": b.size, "stream": 0, "frames": frames,
                              "time_us": 2 * step + 1})
    # at the end of the step every arena buffer is free again; persistent ones are not
    segments = [_segment(ARENA_ADDRESS, [_block(ARENA_ADDRESS, arena, "inactive",
                                                requested=0)], arena)]
    blocks, addr = [], PERSISTENT_ADDRESS
    for t in view.persistent:
        size = -(-max(t.nbytes, 1) // ALIGN) * ALIGN
        frames = [{"filename": f"{view.name} plan", "line": 0, "name": f"{t.role} {t.name}"}]
        blocks.append(_block(addr, size, "active_allocated", frames, requested=t.nbytes))
        addr += size
    if blocks:
        segments.append(_segment(PERSISTENT_ADDRESS, blocks, addr - PERSISTENT_ADDRESS))
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "singa_graph static plan"}}


def to_pickle(view: View) -> bytes:
    return pickle.dumps(to_snapshot(view), protocol=4)
