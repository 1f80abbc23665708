"""What the kernel-vs-CPU harness cannot check for the reduction family: outputs bound over
inputs (the row-wise ops' ``inplace``), and labels out of range (the CPU kernel raises; a GPU
kernel cannot, so the loss turns NaN)."""
import numpy as np
import pytest

from singa_graph.ops import activation as act
from singa_graph.ops import loss
from singa_graph.runtime import registry

from harness import rand

# rows of 3, 10 and 70: one thread per row, a narrow group, a whole block (simulator sizes)
SHAPES = [(5, 3), (5, 10), (3, 70), (2, 6, 3)]
OPS = [act.Softmax, act.LogSoftmax, act.SoftmaxGrad, act.LogSoftmaxGrad]


def _bind_cuda(gpu, op, arrays, outs):
    need = registry.workspace_bytes(op, arrays, outs, "cuda")
    with gpu.activate():
        registry.bind(op, arrays, outs, "cuda", gpu.arena(need) if need else None)()
        gpu.synchronize()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("cls", OPS, ids=lambda c: c.__name__)
def test_output_over_first_input(cls, shape, gpu):
    """Each lane must read every element it needs before any lane of its row writes."""
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
    _bind_cuda(gpu, op, dev, [dev[0]])
    np.testing.assert_allclose(gpu.get(dev[0]), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [6, 40])  # one block, and partials added by a second launch
def test_label_out_of_range_gives_nan(n, gpu):
    x = rand(n, 10, seed=5)
    lab = np.zeros(n, np.int32)
    lab[n // 2] = 10
    out = gpu.empty((1,), np.float32)
    _bind_cuda(gpu, loss.SoftmaxCrossEntropy(), [gpu.put(x), gpu.put(lab)], [out])
    assert np.isnan(gpu.get(out)).all()
    dx = gpu.empty((n, 10), np.float32)
    dy = np.ones(1, np.float32)
    _bind_cuda(gpu, loss.SoftmaxCrossEntropyGrad(), [gpu.put(x), gpu.put(lab), gpu.put(dy)],
               [dx])
    g = gpu.get(dx)
    assert np.isnan(g[n // 2]).all() and np.isfinite(np.delete(g, n // 2, 0)).all()
