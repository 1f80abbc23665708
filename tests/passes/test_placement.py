"""The placement of buffers with lifetimes into one arena: valid for any hashable keys, never
below the live-bytes bound, at the bound on the chain-like lifetimes of deep networks, and
linear-ish in the number of keys (the sweep; the greedy search only runs on small sets)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from singa_graph.passes import placement
from singa_graph.passes.placement import align, peak, place, sweep


def assert_valid(sizes, intervals, offsets, arena):
    assert set(offsets) == set(intervals)
    items = sorted(intervals, key=lambda k: offsets[k])
    for k in items:
        assert offsets[k] % placement.ALIGN == 0
        assert offsets[k] + align(sizes[k]) <= arena
    for i, a in enumerate(items):  # no two keys live at once share a byte
        for b in items[i + 1:]:
            (s1, e1), (s2, e2) = intervals[a], intervals[b]
            if s1 <= e2 and s2 <= e1:
                lo1, hi1 = offsets[a], offsets[a] + align(sizes[a])
                lo2, hi2 = offsets[b], offsets[b] + align(sizes[b])
                assert hi1 <= lo2 or hi2 <= lo1, f"{a} and {b} overlap"


@st.composite
def problems(draw):
    n = draw(st.integers(1, 60))
    sizes, intervals = {}, {}
    for i in range(n):
        a = draw(st.integers(0, 40))
        b = draw(st.integers(a, min(a + draw(st.integers(0, 40)), 50)))
        key = draw(st.sampled_from([("group", i), f"buf{i}", ("workspace", i, "step")]))
        sizes[key] = draw(st.integers(0, 5000))
        intervals[key] = (a, b)
    return sizes, intervals


@settings(max_examples=80, deadline=None)
@given(problems())
def test_place_is_valid_for_any_keys(problem):
    sizes, intervals = problem
    aligned_peak = peak({k: align(v) for k, v in sizes.items()}, intervals)
    for longest in (False, True):
        offsets, arena = sweep(sizes, intervals, longest_first=longest)
        assert_valid(sizes, intervals, offsets, arena)
        assert arena >= aligned_peak
    offsets, arena = place(sizes, intervals)
    assert_valid(sizes, intervals, offsets, arena)
    assert arena >= aligned_peak


def test_per_step_workspaces_share_bytes_with_each_other():
    """Workspace keys live for exactly one step: they all reuse the same bytes."""
    sizes = {("ws", t): 1000 * (t % 3 + 1) for t in range(10)}
    intervals = {("ws", t): (t, t) for t in range(10)}
    sizes["activation"] = 640
    intervals["activation"] = (0, 9)
    offsets, arena = place(sizes, intervals)
    assert_valid(sizes, intervals, offsets, arena)
    assert arena == align(640) + align(3000)


def _deep_chain(layers, act=4096, grad=1024, temp=4096):
    """The lifetimes of a deep network's training step: activations live from the forward
    to the backward of their layer; gradients and temporaries live a step or two."""
    sizes, iv, t = {}, {}, 0
    for i in range(layers):
        sizes[("act", i)], iv[("act", i)] = act, (i, 2 * layers - i)
        sizes[("tmp", i)], iv[("tmp", i)] = temp, (i, i)
    for i in reversed(range(layers)):
        t = 2 * layers - i
        sizes[("dx", i)], iv[("dx", i)] = act, (t, t + 1)
        sizes[("dw", i)], iv[("dw", i)] = grad, (t, t)
    return sizes, iv


def test_sweep_reaches_the_bound_on_deep_chains_with_more_keys_than_the_greedy_limit():
    sizes, iv = _deep_chain(placement.GREEDY_MAX_KEYS)  # 4x the limit: sweep only
    offsets, arena = place(sizes, iv)
    assert arena == peak({k: align(v) for k, v in sizes.items()}, iv)
    assert_valid(*_deep_chain(40), *place(*_deep_chain(40)))
