"""Plans the picture tests draw: the CNN training step of ``zoo`` (the README's picture)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from singa_graph import opt, random as sg_random, zoo
from singa_graph.ir.tensor import Placeholder

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def artifacts() -> str:
    """Where tests leave files for people to look at (screenshots): test-artifacts/ in the
    repository, or $SINGA_GRAPH_TEST_ARTIFACTS."""
    d = os.environ.get("SINGA_GRAPH_TEST_ARTIFACTS", os.path.join(REPO, "test-artifacts"))
    os.makedirs(d, exist_ok=True)
    return d


def training_plan(model, shape, batch=4):
    sg_random.seed(0)
    model.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    x = Placeholder((batch,) + shape, np.float32, name="x")
    y = Placeholder((batch,), np.int32, name="y")
    model.compile([x], is_train=True, use_graph=True)
    return model, model.plan_for(x, y)


@pytest.fixture(scope="module")
def cnn_plan():
    """The compiled (not run) training plan of ``zoo.CNN`` for batch 4."""
    return training_plan(zoo.CNN(), (1, 28, 28))[1]


@pytest.fixture(scope="module")
def resnet_plan():
    """A ResNet training plan: nested layer scopes (``stages.0.conv1``) for the clusters."""
    return training_plan(zoo.ResNet(widths=(4, 8), blocks=1), (1, 8, 8), batch=2)[1]

