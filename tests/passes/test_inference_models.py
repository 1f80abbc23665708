"""The inference passes on imported torchvision models (random weights, BatchNorm
statistics with a spread, exported by torch.onnx with the BatchNorms and Identity nodes
kept): outputs match the unoptimised plan within the folding bound, and the plans lose
their BatchNorms, Identities and separate activations. Skipped without torchvision."""
from __future__ import annotations

import io
import sys
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.library.register_fake = lambda *a, **k: (lambda f: f)  # torchvision's ops need none
torchvision = pytest.importorskip("torchvision")

from singa_graph import onnx as sg_onnx  # noqa: E402

comp = sys.modules["singa_graph.passes.compile"]


def _export(name):
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
                mod.running_mean.uniform_(-0.3, 0.3)
                mod.running_var.uniform_(0.5, 2.0)
    f = io.BytesIO()
    torch.onnx.export(m, torch.randn(1, 3, 32, 32), f, opset_version=17, dynamo=False,
                      training=torch.onnx.TrainingMode.PRESERVE)  # keeps BatchNormalization
    return f.getvalue()


def _plan_and_output(proto, x):
    m = sg_onnx.load(proto)
    m.eval()
    return m.plan_for(x), m(x).data.copy()


@pytest.mark.parametrize("name, fused", [
    ("resnet18", "Conv2d+BatchNorm+Add+ReLU"),
    ("mobilenet_v2", "Conv2d+BatchNorm+ReLU6"),
    ("mobilenet_v3_small", "Conv2d+BatchNorm+HardSwish")])
def test_imported_model_matches_unoptimised(name, fused, monkeypatch):
    proto = _export(name)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    plan, y = _plan_and_output(proto, x)
    monkeypatch.setattr(comp, "optimize_for_inference", lambda g: {})
    plan0, y0 = _plan_and_output(proto, x)
    before, after = Counter(n.type for n in plan0.nodes), Counter(n.type for n in plan.nodes)
    print(f"{name}: {len(plan0.nodes)} -> {len(plan.nodes)} nodes; removed "
          f"{dict(before - after)}; max |y - y0| / max |y0| = "
          f"{np.abs(y - y0).max() / np.abs(y0).max():.2e}")
    assert after["BatchNorm2d"] == 0 and before["BatchNorm2d"] > 0
    assert after["Identity"] == 0
    assert fused in {n.op.label for n in plan.nodes}
    # the folding bound of one convolution, here over 20-50 of them (measured: 2-5e-7)
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-4 * np.abs(y0).max())
