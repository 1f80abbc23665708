"""A small conv/pool network compiled into a plan for the CUDA device matches the same plan
on the CPU: Conv2d with the ReLU that the fusion pass folds into it, grouped and depthwise
convs, both conv gradients, every pooling op, all sharing one arena and planned
workspace."""
import numpy as np

from singa_graph import ops
from singa_graph.ir import Graph, Placeholder
from singa_graph.ops import conv, pool
from singa_graph.passes import compile

from harness import rand


def _graph(device):
    x = Placeholder((2, 3, 5, 5), device=device)
    w1 = Placeholder((4, 3, 3, 3), device=device)
    b1 = Placeholder((4,), device=device)
    w2 = Placeholder((4, 2, 2, 2), device=device)
    w3 = Placeholder((4, 1, 2, 2), device=device)
    y = ops.relu(conv.conv2d(x, w1, b1, padding=1))          # fused: Conv2d(relu=True)
    p = pool.max_pool2d(y, 3, 2, 1)
    z = conv.conv2d(p, w2, groups=2, padding=(1, 0, 0, 1))
    d = conv.conv2d(z, w3, groups=4, stride=2)
    a = (conv.Conv2dGradInput(1, (1, 0, 0, 1), 1, 2, x_shape=p.shape)(z, w2),
         conv.Conv2dGradWeight(1, (1, 0, 0, 1), 1, 2, w_shape=w2.shape)(z, p),
         pool.MaxPool2dGrad(3, 2, 1)(p, y),
         pool.avg_pool2d(z, 2, 1, count_include_pad=True),
         pool.AvgPool2dGrad(2, None, 0, x_shape=z.shape)(pool.avg_pool2d(z, 2)),
         pool.global_average_pool(d))
    return Graph([y, p, z, d, *a], inputs=[x, w1, b1, w2, w3])


def test_conv_pool_plan_matches_cpu(gpu):
    feeds = [rand(2, 3, 5, 5), rand(4, 3, 3, 3, seed=1), rand(4, seed=2),
             rand(4, 2, 2, 2, seed=3), rand(4, 1, 2, 2, seed=4)]
    g_cpu, g_gpu = _graph(None), _graph(gpu)
    cpu = compile(g_cpu).run(feeds)
    plan = compile(g_gpu)
    assert any(getattr(n.op, "relu", False) for n in g_gpu.nodes)  # the fused epilogue ran
    for got, want in zip(plan.run(feeds), cpu):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _inference_graph(device):
    """Conv + eval BatchNorm (folded) + residual Add + ReLU6 (fused), and a 1x1 conv + SiLU:
    the inference passes on a plan for the device."""
    from singa_graph.ir.tensor import Tensor

    def const(a):
        return Tensor(data=np.asarray(a, np.float32), device=device, requires_grad=False)

    x = Placeholder((2, 3, 5, 5), device=device)
    r = Placeholder((2, 4, 5, 5), device=device)
    y = conv.conv2d(x, const(rand(4, 3, 3, 3, seed=5)), None, padding=1)
    y = ops.batchnorm_2d(y, const(rand(4, seed=6, low=0.5, high=2)), const(rand(4, seed=7)),
                         const(rand(4, seed=8)), const(rand(4, seed=9, low=0.5, high=2)),
                         training=False)
    y = ops.minimum(ops.maximum(ops.add(y, r), const(0)), const(6))
    z = conv.conv2d(y, const(rand(4, 4, 1, 1, seed=10)), const(rand(4, seed=11)))
    return Graph([ops.mul(z, ops.sigmoid(z))], inputs=[x, r])


def test_inference_plan_matches_cpu(gpu):
    feeds = [rand(2, 3, 5, 5, low=-3, high=3), rand(2, 4, 5, 5, seed=1, low=-3, high=3)]
    cpu = compile(_inference_graph(None)).run(feeds)
    plan = compile(_inference_graph(gpu))
    labels = [n.op.label for n in plan.nodes]
    assert labels == ["Conv2d+BatchNorm+Add+ReLU6", "Conv2d+SiLU"], labels
    assert plan.memory_report()["folded_bytes"] == 4 * (4 * 3 * 9 + 4)
    for got, want in zip(plan.run(feeds), cpu):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
