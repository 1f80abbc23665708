"""Optimizer updates read their hyperparameters from device memory at run time: a new
learning rate written between two runs of one bound step takes effect without rebinding,
on the GPU as on the CPU."""
import numpy as np
import pytest

from singa_graph.ops import update as up
from singa_graph.runtime import registry
from singa_graph.runtime.device import get_default_device

from harness import rand


def _two_runs(device, op, inputs, k, values):
    """Run ``op`` twice on ``device``, writing ``values[r]`` into input ``k`` before run r;
    return the mutated inputs afterwards."""
    ins = [device.put(np.array(a, copy=True)) for a in inputs]
    outs = [device.empty(inputs[0].shape, inputs[0].dtype)]
    with device.activate():
        step = registry.bind(op, ins, outs, device.kind)
        for v in values:
            device.copy(ins[k], np.array(v, np.float64))
            step()
        device.synchronize()
    return [device.get(ins[i]) for i in op.mutates]


@pytest.mark.parametrize("op,extra,lr_at", [
    (up.SGDUpdate(True, True), [rand(4, 3, seed=3), 0.05, 0.9, 0.1, 0.01], 3),
    (up.AdamUpdate(), [np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32), 0.0, 0.01,
                       0.9, 0.999, 1e-8, 0.0], 5),
    (up.RMSPropUpdate(), [np.zeros((4, 3), np.float32), 0.01, 0.9, 1e-8, 0.0], 3),
    (up.AdaGradUpdate(), [np.zeros((4, 3), np.float32), 0.1, 1e-10, 0.0], 3),
], ids=["SGD", "Adam", "RMSProp", "AdaGrad"])
def test_learning_rate_changes_between_runs(gpu, op, extra, lr_at):
    inputs = [rand(4, 3), rand(4, 3, seed=1)] + [np.asarray(a) if np.ndim(a) else
                                                np.array(a, np.float64) for a in extra]
    cpu = _two_runs(get_default_device(), op, inputs, lr_at, [0.1, 0.003])
    dev = _two_runs(gpu, op, inputs, lr_at, [0.1, 0.003])
    for a, b in zip(dev, cpu):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # and the change mattered: a constant learning rate ends elsewhere
    same = _two_runs(get_default_device(), op, inputs, lr_at, [0.1, 0.1])
    assert not np.allclose(same[0], cpu[0])
