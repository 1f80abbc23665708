"""Smoke tests of the examples and the ``singa-graph`` command, and graph/eager agreement."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sklearn")

from singa_graph import cli, data, opt, random as sg_random, zoo  # noqa: E402

# 70 samples with batch 16: the last test batch (6 rows) compiles a second inference plan
TINY = ["--epochs", "1", "--limit", "70", "--batch-size", "16", "--quiet", "--lr", "0.01"]
EXTRA = {"mlp": [], "cnn": [], "resnet": ["--width", "4", "--image-size", "8"],
         "xception": ["--small"]}


@pytest.mark.parametrize("mode", ["--graph", "--eager"])
@pytest.mark.parametrize("name", cli.MODELS)
def test_example_runs(name, mode, capsys):
    acc = cli.load_example(name).main(TINY + EXTRA[name] + [mode])
    assert 0.0 <= acc <= 1.0
    out = capsys.readouterr().out
    assert "final test accuracy" in out
    if mode == "--graph":
        assert "arena/lower" in out and "plan total" in out


def test_xception_full_constructs_and_compiles(capsys):
    cli.load_example("xception").main(["--compile-only", "--batch-size", "1"])
    assert "299x299x3" in capsys.readouterr().out


def test_cli_train_forwards_options(capsys):
    assert cli.main(["train", "mlp"] + TINY + ["--schedule", "topological"]) == 0
    assert "schedule=topological" in capsys.readouterr().out


def test_cli_info(capsys):
    assert cli.main(["info", "cnn", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "Graph CNN.train_one_batch" in out and "schedule: memory" in out
    assert "arena / no reuse" in out


@pytest.mark.parametrize("argv", [[], ["train"], ["info"], ["export"], ["import"], ["dump"],
                                  ["train", "cnn"]])
def test_cli_help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv + ["--help"])
    assert e.value.code == 0
    assert "usage:" in capsys.readouterr().out


def _losses(make, x, y, graph, steps=20, bs=16):
    sg_random.seed(0)
    m = make()
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    m.compile([x[:bs]], is_train=True, use_graph=graph)
    out = []
    for i in range(steps):
        s = (i * bs) % (len(x) - bs + 1)
        _, loss = m(x[s:s + bs], y[s:s + bs])
        out.append(loss.data.item())
    return out


def _small_xception():
    ex = cli.load_example("xception")
    cfg = dict(ex.SMALL)
    size = cfg.pop("size")
    return ex.XceptionModel(num_classes=10, in_channels=3, image_size=size, **cfg), size


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet", "xception"])
def test_graph_and_eager_losses_agree(name):
    size = {"mlp": None, "cnn": 28, "resnet": 8, "xception": None}[name]
    x, y, _, _ = data.load_digits(pad_to=size)
    x, y = x[:320], y[:320]
    make = {"mlp": lambda: zoo.MLP(hidden=(64,)),
            "cnn": lambda: zoo.CNN(channels=(8, 16)),
            "resnet": lambda: zoo.ResNet(widths=(8, 16)),
            "xception": lambda: _small_xception()[0]}[name]
    if name == "mlp":
        x = x.reshape(len(x), -1)
    if name == "xception":  # the example feeds 3-channel images resized to its input size
        side = _small_xception()[1]
        x = data.resize_images(x, side, mode="nearest")
        x = np.ascontiguousarray(np.repeat(x, 3, axis=1))
    g = _losses(make, x, y, graph=True)
    e = _losses(make, x, y, graph=False)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, e, rtol=1e-5)
    assert g[-1] < g[0]


def test_gpt_example_smoke(tmp_path, capsys):
    """A tiny GPT on 64 KiB of the standard library: losses are finite, the validation loss
    is reported beside the unigram baseline, sampling and --dump work."""
    res = cli.load_example("gpt").main(
        ["--epochs", "1", "--steps", "3", "--batch-size", "4", "--seq-len", "16",
         "--d-model", "16", "--heads", "2", "--blocks", "1", "--max-mib", "0.0625",
         "--sample", "20", "--tied", "--dump", str(tmp_path)])
    (h,) = res["history"]
    assert np.isfinite(h["train"]) and np.isfinite(h["val"]) and 2.0 < res["unigram"] < 5.0
    out = capsys.readouterr().out
    assert "unigram baseline" in out and "sample:" in out and "wrote" in out
    assert (tmp_path / "train.svg").exists() and (tmp_path / "train.memory.svg").exists()
