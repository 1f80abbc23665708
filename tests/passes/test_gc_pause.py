"""The collector pause around tracing and compiling: objects made during it go straight to
the oldest generation (no scan of the whole graph by the next young collection), objects the
program froze stay frozen, and a collector the program disabled stays disabled."""
from __future__ import annotations

import gc

from singa_graph.passes.compile import gc_paused


def _young_objects(n=20_000):
    return [[i] for i in range(n)]


def test_objects_made_while_paused_leave_the_young_generation():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        keep = _young_objects()
        assert gc.get_count()[0] >= len(keep)
    assert gc.isenabled()
    oldest = {id(x) for x in gc.get_objects(generation=2)}
    assert all(id(x) in oldest for x in keep)  # not left for young collections to walk
    assert gc.get_freeze_count() == 0


def test_objects_the_program_froze_stay_frozen():
    sentinel = [object()]  # tracked by the collector, frozen below
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            keep = _young_objects()
        # frozen objects may die meanwhile (their count drops), but none is unfrozen, and
        # the objects made during the pause are not frozen with them
        tracked = {id(x) for x in gc.get_objects()}
        assert id(sentinel) not in tracked
        assert all(id(x) in tracked for x in keep[:100])
        assert frozen - 1000 < gc.get_freeze_count() <= frozen
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with gc_paused():
            with gc_paused():
                pass
        assert not gc.isenabled()
    finally:
        gc.enable()
