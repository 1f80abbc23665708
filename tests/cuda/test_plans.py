"""Compiled plans on the CUDA device: the same graph, schedule and memory plan as on the
CPU, one device arena, no allocation by any kernel, feeds checked before anything runs."""
import numpy as np
import pytest

from singa_graph import layer, model, random as sg_random, tensor
from singa_graph.errors import ShapeError
from singa_graph.passes.verify import verify
from singa_graph.runtime import gpu as gpu_runtime


class Net(model.Model):
    """Dense layers, a transpose and a concatenation: the same kernels bound at several
    sizes in one plan."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = layer.Linear(8), layer.Linear(3)
        self.relu = layer.ReLU()
        self.cat = layer.Cat(1)

    def forward(self, x):
        h = self.relu(self.l1(x))
        return self.l2(self.cat([h, x]))


def _built(dev, x):
    sg_random.seed(0)
    m = Net()
    m.compile([tensor.from_numpy(x, dev)], is_train=False, use_graph=True)
    return m


X = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)


def test_forward_plan_matches_the_cpu_plan(gpu):
    cpu, cuda = _built(None, X), _built(gpu, X)
    ref, got = cpu(X).to_numpy(), cuda(X).to_numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    pc, pg = cpu.last_plan, cuda.last_plan
    assert [n.type for n in pc.nodes] == [n.type for n in pg.nodes]  # same schedule
    assert pc.memory.arena_bytes == pg.memory.arena_bytes
    verify(pg)
    r = cuda.memory_report()
    assert "CudaDevice" in r["device"] and r["host_staging_bytes"] == X.nbytes + ref.nbytes


def test_a_device_tensor_feeds_without_a_host_copy(gpu):
    m = _built(gpu, X)
    out = m(tensor.from_numpy(X, gpu)).to_numpy()
    np.testing.assert_allclose(out, m(X).to_numpy(), rtol=0, atol=0)


def test_eager_mode_on_the_device_matches_graph_mode(gpu):
    m = _built(gpu, X)
    g = m(X).to_numpy()
    m.graph(False)
    e = m(X)
    assert gpu.is_array(e.data)
    np.testing.assert_allclose(e.to_numpy(), g, rtol=1e-6, atol=1e-7)


def test_binding_and_running_a_plan_allocate_no_device_memory_beyond_its_own(gpu,
                                                                          monkeypatch):
    cuda = gpu_runtime.cuda()
    calls = []
    for name in ("device_array", "to_device", "device_array_like"):
        real = getattr(cuda, name)

        def counting(*a, _real=real, _name=name, **k):
            out = _real(*a, **k)
            calls.append((_name, out.nbytes))
            return out
        monkeypatch.setattr(cuda, name, counting)
    m = _built(gpu, X)
    n_params = len(m.get_params())
    calls.clear()
    plan = m.plan_for(X)
    # the arena and the plan's own input and output buffers: what its report counts
    r = plan.memory_report()
    assert sum(n for _, n in calls) == r["plan_bytes"], (calls, r)
    assert len(calls) == 3
    calls.clear()
    for _ in range(2):
        plan.run([X])
    assert calls == [], calls
    assert n_params == 4


def test_poison_mode_runs_on_the_device(gpu):
    sg_random.seed(0)
    m = Net()
    m.compile([tensor.from_numpy(X, gpu)], is_train=False, use_graph=True, poison=True)
    out = m(X).to_numpy()
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, _built(None, X)(X).to_numpy(), rtol=1e-5, atol=1e-6)


def test_a_bad_feed_is_refused_before_anything_runs(gpu):
    m = _built(gpu, X)
    m(X)
    with pytest.raises(ShapeError):
        m.last_plan.run([X[:, :5]])
