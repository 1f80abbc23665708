"""Numba caches of another version's kernel sources are dropped (runtime/kernels/__init__.py):
Numba checks a cached kernel against its own file only, not against what it calls."""
from singa_graph.runtime import kernels


def test_caches_of_other_sources_are_dropped_and_stamped(tmp_path):
    d = tmp_path / "__pycache__"
    d.mkdir()
    for name in ("conv.forward-12.py311.nbi", "conv.forward-12.py311.1.nbc", "conv.cpython.pyc"):
        (d / name).write_text("x")
    assert kernels.drop_stale_caches([d], "v1") == [d]
    assert sorted(p.name for p in d.iterdir()) == ["conv.cpython.pyc", "singa_graph_sources"]
    (d / "pool.max-3.py311.nbi").write_text("x")  # compiled by version v1: kept
    assert kernels.drop_stale_caches([d], "v1") == []
    assert (d / "pool.max-3.py311.nbi").exists()
    assert kernels.drop_stale_caches([d], "v2") == [d]  # an upgrade in place
    assert not (d / "pool.max-3.py311.nbi").exists()
    assert (d / "singa_graph_sources").read_text() == "v2"


def test_a_folder_that_cannot_be_written_is_skipped(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert kernels.drop_stale_caches([blocker / "__pycache__"], "v1") == []


def test_the_digest_follows_the_kernels_and_the_formulas(tmp_path, monkeypatch):
    root = tmp_path / "runtime" / "kernels"
    (root / "cpu").mkdir(parents=True)
    (tmp_path / "ops").mkdir()
    (root / "cpu" / "vexp.py").write_text("a = 1")
    (tmp_path / "ops" / "formulas.py").write_text("b = 1")
    monkeypatch.setattr(kernels, "_ROOT", root)
    first = kernels.sources_digest()
    assert kernels.sources_digest() == first
    (tmp_path / "ops" / "formulas.py").write_text("b = 2")
    second = kernels.sources_digest()
    (root / "cpu" / "vexp.py").write_text("a = 2")
    assert len({first, second, kernels.sources_digest()}) == 3
