"""The backward recomputes GELU and LayerNorm outputs from inputs it keeps anyway: the plan
is smaller and its numbers are those of the plan that keeps them (and of eager mode)."""
from __future__ import annotations

import importlib

import numpy as np

from singa_graph import autograd, layer, model, opt, random as sg_random

compile_module = importlib.import_module("singa_graph.passes.compile")  # the module, not
# the function that singa_graph.passes exports under the same name


class _Net(model.Model):
    def __init__(self):
        super().__init__()
        self.blocks = [layer.TransformerBlock(16, 2, causal=True) for _ in range(2)]
        self.ln = layer.LayerNorm(16)
        self.head = layer.Linear(5)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(autograd.reshape(self.ln(x), (-1, 16)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def _trained(graph, steps=3, poison=False):
    sg_random.seed(0)
    m = _Net()
    m.poison = poison
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8, 16)).astype(np.float32)
    y = rng.integers(0, 5, 32).astype(np.int32)
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    m.compile([x], is_train=True, use_graph=graph)
    losses = [np.asarray(m(x, y)[1].data).copy() for _ in range(steps)]
    return m, losses, {k: np.asarray(v.data).copy() for k, v in m.get_params().items()}


def test_recomputed_plan_is_smaller_and_bitwise_equal(monkeypatch):
    m, losses, params = _trained(graph=True, poison=True)
    plan = m._last_plan
    again = [n.name for n in plan.memory.order if n.name.endswith("_again")]
    assert any(a.startswith("Gelu") for a in again), again
    assert any(a.startswith("LayerNorm") for a in again), again
    arena = m.memory_report()["arena_bytes"]
    _, e_losses, e_params = _trained(graph=False)
    monkeypatch.setattr(compile_module, "recompute_cheap", lambda graph, fetches: 0)
    k, k_losses, k_params = _trained(graph=True)
    assert not any(n.name.endswith("_again") for n in k._last_plan.memory.order)
    assert arena < k.memory_report()["arena_bytes"]
    for other_losses, other_params in ((k_losses, k_params), (e_losses, e_params)):
        for a, b in zip(losses, other_losses):
            np.testing.assert_array_equal(a, b)
        for name in params:
            np.testing.assert_array_equal(params[name], other_params[name])


def test_inference_plans_and_inputs_that_die_are_left_alone():
    from singa_graph import ops
    from singa_graph.ir import Graph, Placeholder, building
    from singa_graph.ir.tensor import Parameter
    from singa_graph.passes.autodiff import autodiff
    from singa_graph.passes.recompute import recompute_cheap

    with building():
        x = Placeholder((4, 6), np.float32)
        w = Parameter(data=np.ones((6, 6), np.float32))
        h = ops.matmul(x, w)
        y = ops.relu(h)  # ReLU's gradient reads y, not h: h dies in the forward
        z = ops.matmul(y, w)
        loss = ops.sum(z)
        g = Graph([loss])
        autodiff(g, loss)
    n = len(g.nodes)
    assert recompute_cheap(g, [loss]) == 0 and len(g.nodes) == n
