"""What the kernel-vs-CPU harness cannot check for the reduction family: outputs bound over
inputs (the row-wise ops' ``inplace``), labels out of range (the CPU kernel raises; a GPU
kernel cannot, so the loss turns NaN), and a compiled plan in which the fusion pass sets the
batch norm's ``relu`` flags and the planner places workspace and in-place outputs."""
import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops
from singa_graph.ir import Graph
from singa_graph.ops import activation as act
from singa_graph.ops import loss
from singa_graph.ops import norm
from singa_graph.ops import reduce as red
from singa_graph.passes import compile
from singa_graph.passes.autodiff import autodiff
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


def _bn_plan(dev, x, lab):
    """relu(bn(x)) -> softmax over channels -> cross-entropy of the flattened map, plus a
    mean; its backward. No matmul: only this family's kernels and views."""
    n = x.shape[0]
    xp = sg.Placeholder(x.shape, device=dev, name="x")
    lp = sg.Placeholder((n,), dtype="int32", device=dev, name="lab")
    c = x.shape[1]
    scale = sg.Parameter(data=np.linspace(0.5, 1.5, c, dtype=np.float32), device=dev)
    bias = sg.Parameter(data=np.linspace(-0.2, 0.2, c, dtype=np.float32), device=dev)
    rm = sg.Tensor(data=np.zeros(c, np.float32), device=dev, name="rm")
    rv = sg.Tensor(data=np.ones(c, np.float32), device=dev, name="rv")
    h = act.softmax(ops.relu(norm.batchnorm_2d(xp, scale, bias, rm, rv)), 1)
    logits = ops.reshape(h, (n, -1))
    total = ops.add(loss.softmax_cross_entropy(logits, lp), red.mean(ops.mul(h, h)))
    g = Graph([total], inputs=[xp, lp])
    grads = autodiff(g, total)
    g = Graph([total] + list(grads.values()), inputs=[xp, lp])
    plan = compile(g, device=dev)
    outs = [np.array(o, copy=True) for o in plan.run([x, lab])]
    return plan, outs + [dev.get(rm.data), dev.get(rv.data)]


def test_fused_batchnorm_plan_matches_cpu(gpu):
    from singa_graph.runtime.device import get_default_device

    x = rand(6, 3, 4, 4, seed=8, low=-2, high=2)
    lab = np.array([0, 5, 47, 13, 2, 30], np.int32)
    plan, got = _bn_plan(gpu, x, lab)
    types = [(nd.type, getattr(nd.op, "relu", False)) for nd in plan.nodes]
    assert ("BatchNorm2d", True) in types and ("BatchNorm2dGrad", True) in types
    _, want = _bn_plan(get_default_device(), x, lab)
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")
