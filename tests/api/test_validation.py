"""Arguments PyTorch refuses are refused here too, with messages that name them: optimizer
hyperparameters (at construction and when set), layer arguments, command-line options,
corrupt data files; and the plan cache keeps a bounded number of plans."""
from __future__ import annotations

import gzip
import math

import numpy as np
import pytest

from singa_graph import cli, data, layer, opt, zoo
from singa_graph.data import DataError

NAN = math.nan

BAD_OPTIMIZERS = [
    (opt.SGD, dict(lr=-0.1), "lr"),
    (opt.SGD, dict(lr=NAN), "lr"),
    (opt.SGD, dict(momentum=-0.5), "momentum"),
    (opt.SGD, dict(weight_decay=-1e-4), "weight_decay"),
    (opt.SGD, dict(nesterov=True), "nesterov"),
    (opt.Adam, dict(beta_1=1.0), "beta_1"),
    (opt.Adam, dict(beta_1=-0.1), "beta_1"),
    (opt.Adam, dict(beta_2=1.5), "beta_2"),
    (opt.Adam, dict(epsilon=-1e-8), "epsilon"),
    (opt.Adam, dict(lr=-1.0), "lr"),
    (opt.RMSProp, dict(rho=-0.9), "rho"),
    (opt.RMSProp, dict(epsilon=-1.0), "epsilon"),
    (opt.AdaGrad, dict(weight_decay=-1.0), "weight_decay"),
]


@pytest.mark.parametrize("cls,kw,name", BAD_OPTIMIZERS,
                         ids=[f"{c.__name__}-{k}" for c, k, _ in BAD_OPTIMIZERS])
def test_optimizer_arguments_are_validated(cls, kw, name):
    with pytest.raises(ValueError, match=name):
        cls(**kw)


@pytest.mark.parametrize("cls,kw,name", [b for b in BAD_OPTIMIZERS if "nesterov" not in b[1]],
                         ids=[f"{c.__name__}-{k}" for c, k, _ in BAD_OPTIMIZERS
                              if "nesterov" not in k])
def test_setting_a_bad_hyperparameter_keeps_the_old_value(cls, kw, name):
    (k, v), = kw.items()
    o = cls(momentum=0.9) if k == "momentum" else cls()
    old = getattr(o, k)
    with pytest.raises(ValueError, match=name):
        setattr(o, k, v)
    assert getattr(o, k) == old


def test_valid_edge_values_are_accepted():
    opt.SGD(lr=0.0, momentum=0.0)
    opt.Adam(beta_1=0.0, beta_2=0.0, epsilon=0.0)
    opt.SGD(lr=0.1, momentum=0.9, nesterov=True, dampening=0.1)  # SINGA allows dampening


@pytest.mark.parametrize("make,exc,pat", [
    (lambda: layer.Linear(2.7), TypeError, "out_features must be an integer"),
    (lambda: layer.Linear(0), ValueError, "out_features must be >= 1"),
    (lambda: layer.Linear(3.0, 4), TypeError, "in_features"),
    (lambda: layer.Conv2d(4, 3, group=0), ValueError, "group must be >= 1"),
    (lambda: layer.Conv2d(4, 3, groups=-2), ValueError, "group"),
    (lambda: layer.Conv2d(4, 3, stride=0), ValueError, "stride"),
    (lambda: layer.Conv2d(4, 0), ValueError, "kernel_size"),
    (lambda: layer.Conv2d(4, 3, padding=-1), ValueError, "padding"),
    (lambda: layer.Conv2d(4.5, 3), TypeError, "nb_kernels"),
    (lambda: layer.MaxPool2d(2, stride=0), ValueError, "stride"),
    (lambda: layer.Dropout(1.0), ValueError, "ratio"),
], ids=["linear-float", "linear-zero", "linear-in-float", "conv-group0", "conv-groups-neg",
        "conv-stride0", "conv-kernel0", "conv-pad-neg", "conv-float", "pool-stride0",
        "dropout-1"])
def test_layer_arguments_are_validated(make, exc, pat):
    with pytest.raises(exc, match=pat):
        make()


def test_numpy_integers_are_fine_as_layer_arguments():
    assert layer.Linear(np.int64(3)).out_features == 3
    assert layer.Conv2d(np.int32(4), 3, group=np.int64(2)).group == 2


@pytest.mark.parametrize("argv,pat", [
    (["--epochs", "-1"], "--epochs: must be an integer >= 0"),
    (["--lr", "nan"], "--lr: must be a finite number > 0"),
    (["--lr", "-1"], "--lr: must be a finite number > 0"),
    (["--momentum", "2"], "--momentum: must be a finite number >= 0.0 and < 1.0"),
    (["--weight-decay", "inf"], "--weight-decay"),
    (["--hidden", "0"], "--hidden: must be an integer >= 1"),
    (["--batch-size", "0"], "--batch-size: must be an integer >= 1"),
    (["--epochs", "two"], "'two' is not an integer"),
])
def test_command_line_options_are_validated(argv, pat, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "mlp", *argv])
    assert e.value.code == 2
    assert pat in capsys.readouterr().err


def test_info_batch_size_is_validated(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["info", "mlp", "--batch-size", "0"])
    assert e.value.code == 2 and "--batch-size" in capsys.readouterr().err


@pytest.mark.parametrize("content,name", [
    (b"\x1f\x8b\x08\x00garbage", "train-images-idx3-ubyte.gz"),  # bad gzip stream
    # mtime=0: the same bytes (and test id) in every process, as pytest-xdist requires
    (gzip.compress(b"\x00\x00\x08\x03" + b"\x00" * 40, mtime=0)[:20],
     "train-labels-idx1-ubyte.gz"),
    (b"not gzip at all", "t10k-images-idx3-ubyte.gz"),
])
def test_corrupt_mnist_files_are_named(tmp_path, content, name):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=str(path).replace("\\", "\\\\")):
        data.read_idx(str(path))


# ---------------------------------------------------------------------------- plan cache
def test_plan_cache_keeps_the_most_recently_used_plans():
    m = zoo.MLP(hidden=(8,), num_classes=3)
    m.set_optimizer(opt.SGD(lr=0.1))
    m.compile([np.zeros((2, 5), np.float32)])
    m.max_plans = 2

    def step(n):
        m(np.zeros((n, 5), np.float32), np.zeros(n, np.int32))
        return m.last_plan

    p2, p3 = step(2), step(3)
    assert step(2) is p2  # cached, and now the most recently used
    p4 = step(4)  # evicts batch 3, the least recently used
    assert len(m.plans) == 2 and set(map(id, m.plans)) == {id(p2), id(p4)}
    assert step(3) is not p3  # compiled again
    assert len(m.plans) == 2
    m.max_plans = 0
    with pytest.raises(ValueError, match="max_plans"):
        step(5)
