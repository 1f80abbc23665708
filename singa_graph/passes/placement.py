"""Offsets for buffers with known sizes and lifetimes: dynamic storage allocation, offline.

:func:`place` takes any hashable keys with a byte size and an inclusive lifetime
``(first step, last step)`` and returns an offset per key and the arena size, such that two
keys whose lifetimes intersect never share a byte. Keys can be storage groups of tensors,
per-step kernel workspaces, or anything else the caller plans into the same arena.

Two strategies, the smaller arena wins:

* **Sweep** (always, O(n log n)): walk the steps in order, release the blocks whose lifetime
  ended, and give each buffer starting at the step the best-fitting free block (the smallest
  one large enough, lowest offset on ties), or the top of the arena. Free blocks live in two
  sorted lists (by offset, for coalescing neighbours; by size, for best fit), and a block
  released at the top lowers the top, so the arena is the highest top ever reached.
* **Greedy by size** (TVM's USMP greedy, ONNX Runtime's mem pattern planner): keys in a
  priority order each take the lowest offset not overlapping a placed key whose lifetime
  intersects theirs; several priorities (largest first, longest-lived-times-size first, then
  seeded perturbations of the size order). Each try scans the placed keys, O(n^2), so it runs
  only while ``n`` is small (``GREEDY_MAX_KEYS``) and within a work budget; there it often
  closes the last gap to the lower bound that the sweep leaves on small, irregular graphs.

The search stops as soon as an arena reaches the (aligned) live-bytes lower bound.
"""
from __future__ import annotations

import bisect
import random

ALIGN = 64
GREEDY_MAX_KEYS = 1500  # greedy first-fit (quadratic) only below this many keys
SEARCH_TRIES = 300  # random greedy orders tried at most
SEARCH_WORK = 4_000_000  # tries * keys^2 stays under this


def align(n: int) -> int:
    """``n`` rounded up to the arena alignment (at least one unit, so no key is empty)."""
    return (max(n, 1) + ALIGN - 1) // ALIGN * ALIGN


def peak(sizes: dict, intervals: dict) -> int:
    """The largest sum of sizes live at one step: no placement can use a smaller arena."""
    return _peak((sizes[k], a, b) for k, (a, b) in intervals.items())


def _peak(buffers) -> int:
    """:func:`peak` of ``(size, first step, last step)`` triples."""
    events: dict[int, int] = {}
    for n, a, b in buffers:
        events[a] = events.get(a, 0) + n
        events[b + 1] = events.get(b + 1, 0) - n
    cur = best = 0
    for t in sorted(events):
        cur += events[t]
        best = max(best, cur)
    return best


# ---------------------------------------------------------------------------- sweep
class _FreeBlocks:
    """Free ``[offset, offset + size)`` blocks below the arena top, coalesced."""

    def __init__(self):
        self.by_off: list[tuple[int, int]] = []
        self.by_size: list[tuple[int, int]] = []
        self.top = 0
        self.high = 0

    def _add(self, off, size):
        bisect.insort(self.by_off, (off, size))
        bisect.insort(self.by_size, (size, off))

    def _remove(self, off, size):
        del self.by_off[bisect.bisect_left(self.by_off, (off, size))]
        del self.by_size[bisect.bisect_left(self.by_size, (size, off))]

    def take(self, size: int) -> int:
        i = bisect.bisect_left(self.by_size, (size, -1))
        if i < len(self.by_size):
            bsize, off = self.by_size[i]
            self._remove(off, bsize)
            if bsize > size:
                self._add(off + size, bsize - size)
            return off
        # nothing fits: grow from the top, taking a free block that ends there
        off = self.top
        if self.by_off:
            last_off, last_size = self.by_off[-1]
            if last_off + last_size == self.top:
                self._remove(last_off, last_size)
                off = last_off
        self.top = off + size
        self.high = max(self.high, self.top)
        return off

    def give(self, off: int, size: int) -> None:
        i = bisect.bisect_left(self.by_off, (off, 0))
        if i > 0:
            p_off, p_size = self.by_off[i - 1]
            if p_off + p_size == off:
                self._remove(p_off, p_size)
                off, size = p_off, p_size + size
                i -= 1
        if i < len(self.by_off):
            n_off, n_size = self.by_off[i]
            if off + size == n_off:
                self._remove(n_off, n_size)
                size += n_size
        if off + size == self.top:
            self.top = off
        else:
            self._add(off, size)


class _Keys:
    """The keys of a placement problem as parallel lists, in the intervals' order: the
    sweeps and the bound read lists, not a dict per key per look-up."""

    def __init__(self, sizes: dict, intervals: dict):
        self.keys = list(intervals)
        spans = [intervals[k] for k in self.keys]
        self.first = [a for a, _ in spans]
        self.last = [b for _, b in spans]
        self.size = [sizes[k] for k in self.keys]
        self.need = [align(n) for n in self.size]

    def floor(self) -> int:
        """:func:`peak` of the aligned sizes."""
        return _peak(zip(self.need, self.first, self.last))


def sweep(sizes: dict, intervals: dict, longest_first: bool = False) -> tuple[dict, int]:
    """Place keys in step order into best-fitting free blocks (see the module docstring).
    Keys starting at the same step go largest first (``longest_first``: longest-lived
    first, so long-lived buffers settle low)."""
    return _sweep(_Keys(sizes, intervals), longest_first)


def _sweep(keys: _Keys, longest_first: bool) -> tuple[dict, int]:
    first, last, size, need = keys.first, keys.last, keys.size, keys.need
    if longest_first:
        def prio(i):
            return (first[i], -(last[i] - first[i]), -size[i])
    else:
        def prio(i):
            return (first[i], -size[i], -(last[i] - first[i]))
    everything = range(len(first))
    starts = sorted(everything, key=prio)  # stable: ties keep the intervals' order
    ends = sorted(everything, key=last.__getitem__)
    free, offset, j = _FreeBlocks(), [0] * len(first), 0
    for i in starts:
        a = first[i]
        while j < len(ends) and last[ends[j]] < a:
            e = ends[j]
            free.give(offset[e], need[e])
            j += 1
        offset[i] = free.take(need[i])
    names = keys.keys
    return {names[i]: offset[i] for i in starts}, free.high


# ---------------------------------------------------------------------------- greedy
def first_fit(items, sizes: dict, intervals: dict) -> tuple[dict, int]:
    """Lowest offset for each key in ``items`` order that clears every placed key whose
    lifetime intersects its own (quadratic; for small key sets)."""
    placed: list[tuple[int, int, int, int]] = []  # (start, end, offset, size)
    offsets, top = {}, 0
    for g in items:
        a, b = intervals[g]
        size = align(sizes[g])
        busy = sorted((off, off + sz) for (s, e, off, sz) in placed if s <= b and a <= e)
        off = 0
        for lo, hi in busy:
            if off + size <= lo:
                break
            off = max(off, hi)
        offsets[g] = off
        placed.append((a, b, off, size))
        top = max(top, off + size)
    return offsets, top


def _greedy_orders(sizes, intervals, rng):
    yield sorted(intervals, key=lambda g: (-sizes[g], intervals[g][0]))
    yield sorted(intervals, key=lambda g: (-(intervals[g][1] - intervals[g][0] + 1)
                                           * sizes[g], intervals[g][0]))
    tries = min(SEARCH_TRIES, SEARCH_WORK // max(len(intervals), 1) ** 2)
    for _ in range(tries):
        yield sorted(intervals, key=lambda g: (-sizes[g] * rng.uniform(0.5, 1.5),
                                               intervals[g][0]))


# ---------------------------------------------------------------------------- entry point
def place(sizes: dict, intervals: dict) -> tuple[dict, int]:
    """``(key -> offset, arena bytes)`` for keys with ``sizes[key]`` bytes live during
    ``intervals[key] = (first, last)`` steps (inclusive); offsets are ``ALIGN``-aligned."""
    if not intervals:
        return {}, 0
    keys = _Keys(sizes, intervals)
    floor = keys.floor()
    best = None
    for longest in (False, True):
        cand = _sweep(keys, longest)
        if best is None or cand[1] < best[1]:
            best = cand
        if best[1] <= floor:
            return best
    if len(intervals) > GREEDY_MAX_KEYS:
        return best
    for items in _greedy_orders(sizes, intervals, random.Random(0)):
        cand = first_fit(items, sizes, intervals)
        if cand[1] < best[1]:
            best = cand
        if best[1] <= floor:
            break
    return best
