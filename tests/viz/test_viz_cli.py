"""``singa-graph dump`` and the examples' ``--dump DIR``."""
from __future__ import annotations

import json
import pickle

import pytest

from singa_graph import cli


def test_cli_dump_html(tmp_path, capsys):
    out = tmp_path / "out.html"
    assert cli.main(["dump", "mlp", "--format", "html", "-o", str(out), "--batch-size",
                     "8"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert "<svg" in out.read_text() and "MLP.train_one_batch" in out.read_text()


def test_cli_dump_format_from_suffix_eval_and_map(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert cli.main(["dump", "cnn", "-o", str(out), "--eval", "--batch-size", "2",
                     "--map"]) == 0
    d = json.loads(out.read_text())
    assert d["name"] == "CNN.forward" and {n["role"] for n in d["nodes"]} == {"forward"}
    assert "live kB" in capsys.readouterr().out


def test_cli_dump_missing_tool(tmp_path, capsys, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert cli.main(["dump", "mlp", "-o", str(tmp_path / "m.svg")]) == 2
    assert "apt-get install graphviz" in capsys.readouterr().err


@pytest.mark.parametrize("name", cli.MODELS)
def test_every_example_has_dump(name, capsys):
    with pytest.raises(SystemExit):
        cli.load_example(name).main(["--help"])
    assert "--dump DIR" in capsys.readouterr().out


def test_example_dump_writes_pictures(tmp_path, capsys, monkeypatch):
    pytest.importorskip("sklearn")
    import shutil

    which = shutil.which
    # the formats that need no external program (rendering is tested in test_viz_dot)
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name in (
        "dot", "rsvg-convert") else which(name, *a, **k))
    d = tmp_path / "pics"
    cli.load_example("mlp").main(["--epochs", "1", "--limit", "40", "--batch-size", "16",
                                  "--quiet", "--dump", str(d)])
    names = {p.name for p in d.iterdir()}
    for stem in ("train", "inference"):
        assert {f"{stem}.html", f"{stem}.dot", f"{stem}.json", f"{stem}.memory.svg",
                f"{stem}.snapshot.pickle"} <= names
    with open(d / "train.snapshot.pickle", "rb") as f:
        assert pickle.load(f)["device_traces"]
    with pytest.raises(SystemExit, match="graph mode"):
        cli.load_example("mlp").main(["--eager", "--dump", str(d), "--limit", "20"])


def test_char_rnn_example_has_dump(tmp_path, capsys, monkeypatch):
    """examples/char_rnn.py (not a `singa-graph` model) takes --dump DIR too."""
    import importlib.util
    import os
    import shutil

    from singa_graph import autograd

    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "char_rnn.py")
    spec = importlib.util.spec_from_file_location("char_rnn", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name in (
        "dot", "rsvg-convert") else which(name, *a, **k))
    d = tmp_path / "pics"
    try:
        mod.main(["--epochs", "0", "--quiet", "--dump", str(d)])
    finally:
        autograd.training = False  # the model switched it on; later tests expect the default
    assert {"train.html", "train.dot", "train.json", "train.memory.svg",
            "train.snapshot.pickle"} <= {p.name for p in d.iterdir()}
    with pytest.raises(SystemExit):
        mod.main(["--epochs", "-1"])
    assert "--epochs: must be an integer >= 0" in capsys.readouterr().err
