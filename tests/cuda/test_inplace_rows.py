"""The row-wise CUDA kernels may write their output over their first input, as their ops
declare (``inplace = {0: 0}``) and as a memory plan arranges: each lane must read every
element it needs before any lane of its row writes. The harness binds distinct arrays, so
this checks the aliased binding against the CPU kernel's result."""
import numpy as np
import pytest

from singa_graph.ops import activation as act
from singa_graph.runtime import registry

from harness import rand

# rows of 3, 10 and 70: one thread per row, a narrow group, a whole block (simulator sizes)
SHAPES = [(5, 3), (5, 10), (3, 70), (2, 6, 3)]
OPS = [act.Softmax, act.LogSoftmax, act.SoftmaxGrad, act.LogSoftmaxGrad]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("cls", OPS, ids=lambda c: c.__name__)
def test_output_over_first_input(cls, shape, gpu):
    from singa_graph.runtime.device import get_default_device

    axis = 1
    x = rand(*shape, seed=3, low=-3, high=3)
    ref = rand(*shape, seed=4)
    if cls in (act.SoftmaxGrad, act.LogSoftmaxGrad):
        p = np.exp(ref) / np.exp(ref).sum(axis, keepdims=True)
        ins = [x, p if cls is act.SoftmaxGrad else np.log(p)]
    else:
        ins = [x]
    op = cls(axis)
    cpu = get_default_device()
    want = cpu.empty(shape, np.float32)
    registry.bind(op, [cpu.put(a.copy()) for a in ins], [want], "cpu")()
    dev = [gpu.put(a.copy()) for a in ins]
    with gpu.activate():
        registry.bind(op, dev, [dev[0]], "cuda")()
        gpu.synchronize()
    np.testing.assert_allclose(gpu.get(dev[0]), want, rtol=1e-5, atol=1e-6)
