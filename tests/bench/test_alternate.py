"""bench/alternate.py: the interleaved bursts that bench/onnx_models.py compares frameworks
with (worker processes kept alive, timed in turns), and the paired ratio of their bursts."""
import os
import sys
import textwrap

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))
alternate = pytest.importorskip("alternate")

WORKER = textwrap.dedent("""
    import sys, time
    import alternate
    kind = sys.argv[1]
    if kind == "crash":
        sys.exit(3)
    if kind == "broken":
        alternate.serve(None, {"error": "ValueError: cannot build"})
    else:
        print("a library's chatter on stdout")
        alternate.serve(lambda: time.sleep(0.002 if kind == "slow" else 0.001),
                        {"kind": kind})
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return str(path)


def test_interleave_times_every_framework_in_bursts(script):
    started = []

    def start(fw, r):
        started.append((fw, r))
        return alternate.Worker(script, [fw])

    runs = alternate.interleave(["fast", "slow"], 2, start, bursts=3, calls=4, pause=0.0)
    assert started == [("fast", 0), ("slow", 0), ("fast", 1), ("slow", 1)]
    for fw in ("fast", "slow"):
        assert len(runs[fw]) == 2
        for res in runs[fw]:
            assert res["kind"] == fw
            assert [len(b) for b in res["bursts"]] == [4, 4, 4]
            assert len(res["times"]) == 12
    assert min(runs["fast"][0]["times"]) >= 0.001
    assert 1.3 < alternate.paired_ratio(runs["slow"], runs["fast"]) < 3.0


def test_a_failed_worker_drops_its_framework(script):
    runs = alternate.interleave(["fast", "broken", "crash"], 2,
                                lambda fw, r: alternate.Worker(script, [fw]),
                                bursts=2, calls=1, pause=0.0)
    assert runs["broken"] == [{"error": "ValueError: cannot build"}]
    assert len(runs["broken"]) == 1 and len(runs["crash"]) == 1
    assert runs["crash"][0]["error"].startswith("worker died")
    assert len(runs["fast"]) == 2 and all(len(r["bursts"]) == 2 for r in runs["fast"])
    assert alternate.paired_ratio(runs["crash"], runs["fast"]) != \
        alternate.paired_ratio(runs["crash"], runs["fast"])  # NaN: nothing to pair


def test_paired_ratio_compares_bursts_of_the_same_moment():
    # the host slows 3x between the bursts: a ratio of overall medians would mix moments
    a = [{"bursts": [[1.0, 1.0], [3.0, 3.0], [3.0, 3.0]]}]
    b = [{"bursts": [[2.0, 2.0], [6.0, 6.0], [6.0, 6.0]]}]
    assert alternate.paired_ratio(a, b) == pytest.approx(0.5)
