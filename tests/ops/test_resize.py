"""Resize (separable interpolation matrices) against onnxruntime and PyTorch, its float64
finite-difference gradient, and plans equal to eager mode."""
import numpy as np
import pytest

from singa_graph import ops
from singa_graph.ir.graph import Graph
from singa_graph.ir.tensor import Placeholder
from singa_graph.passes.compile import compile as compile_plan

from helpers import check_grad, eager

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("mode,align", [("bilinear", False), ("bilinear", True),
                                        ("bicubic", False), ("bicubic", True)])
@pytest.mark.parametrize("size", [(9, 5), (3, 2)])
def test_matches_pytorch_interpolate(mode, align, size):
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 4))
    ref = torch.nn.functional.interpolate(torch.from_numpy(x), size=size, mode=mode,
                                          align_corners=align).numpy()
    coord = "align_corners" if align else "pytorch_half_pixel"
    kind = "linear" if mode == "bilinear" else "cubic"
    got = eager(lambda t: ops.resize(t, (2, 3) + size, kind, coord, cubic_a=-0.75), x)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


def test_antialiased_downsampling_matches_pytorch():
    # PyTorch drops the taps outside the input and renormalises: ONNX's exclude_outside
    x = np.random.default_rng(1).standard_normal((1, 2, 12, 10))
    ref = torch.nn.functional.interpolate(torch.from_numpy(x), size=(5, 4), mode="bilinear",
                                          antialias=True).numpy()
    got = eager(lambda t: ops.resize(t, (1, 2, 5, 4), "linear", "pytorch_half_pixel",
                                     antialias=True, exclude_outside=True), x)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_gradient_and_plan():
    x = np.random.default_rng(2).standard_normal((1, 2, 4, 3))
    check_grad(lambda t: ops.resize(t, (1, 2, 7, 5), "cubic", "half_pixel"), x)
    x32 = x.astype(np.float32)
    p = Placeholder(x32.shape, np.float32)
    y = ops.resize(p, (1, 2, 7, 5), "linear", "align_corners")
    plan = compile_plan(Graph([y], inputs=[p]), fetches=[y])
    ref = eager(lambda t: ops.resize(t, (1, 2, 7, 5), "linear", "align_corners"), x32)
    np.testing.assert_array_equal(plan.run([x32])[0], ref)
