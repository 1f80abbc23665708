"""Helpers for tests that a failed call changes nothing: a small model with BatchNorm buffers
and optimizer state, and a bit-exact snapshot of everything it keeps."""
from __future__ import annotations

import numpy as np

from singa_graph import layer, model, opt
from singa_graph import random as sg_random

XSHAPE = (4, 2, 6, 6)
CLASSES = 5


class BNNet(model.Model):
    """conv -> batch norm -> relu -> linear -> softmax cross-entropy."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(3, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.fc = layer.Linear(CLASSES)
        self.ce = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc(self.relu(self.bn(self.conv(x))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.ce(out, y)
        self.optimizer(loss)
        return out, loss


def make_net(use_graph=True, schedule="memory", optimizer=None, seed=0):
    sg_random.seed(seed)
    m = BNNet()
    m.set_optimizer(optimizer() if optimizer else opt.SGD(lr=0.1, momentum=0.9))
    m.compile([np.zeros(XSHAPE, np.float32)], is_train=True, use_graph=use_graph,
              schedule=schedule)
    return m


def batch(seed=1, n=XSHAPE[0], dtype=np.int32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n,) + XSHAPE[1:]).astype(np.float32)
    return x, rng.integers(0, CLASSES, n).astype(dtype)


def snapshot(m) -> dict:
    """Copies of every parameter, buffer, optimizer state tensor and hyperparameter, and the
    step counters."""
    s = {f"state/{k}": t.data.copy() for k, t in m.get_states().items()}
    for i, o in enumerate(m._optimizers()):
        s.update({f"opt{i}/{k}": t.data.copy() for k, t in o.state_tensors().items()})
        s.update({f"hyper{i}/{k}": np.array(v, copy=True)
                  for k, v in o.hyper_states().items()})
        s.update({f"pending{i}/{k}": np.array(v, copy=True) for k, v in o._pending.items()})
    return s


def assert_same(got: dict, want: dict, what: str = "state") -> None:
    assert sorted(got) == sorted(want), f"{what}: entries differ"
    for k in want:
        a, b = np.asarray(got[k]), np.asarray(want[k])
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {k} changed type"
        assert a.tobytes() == b.tobytes(), f"{what}: {k} changed"
