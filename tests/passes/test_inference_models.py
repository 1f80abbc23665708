"""The inference passes on imported torchvision models (random weights, BatchNorm
statistics with a spread): exported with their BatchNorms kept, outputs match the
unoptimised plan within the folding bound; exported as usual (torch folds the BatchNorms),
bit for bit. Plans lose their BatchNorms, Identities and separate activations. Skipped
without torchvision."""
from __future__ import annotations

import importlib
import io
import sys
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from tests.helpers import torchvision_models  # noqa: E402

torchvision = torchvision_models().import_torchvision()

from singa_graph import host  # noqa: E402
from singa_graph import onnx as sg_onnx  # noqa: E402

comp = sys.modules["singa_graph.passes.compile"]
layout = importlib.import_module("singa_graph.passes.layout")
direct = importlib.import_module("singa_graph.passes.direct")


def _export(name, keep_bn=True, spread=True):
    """The model as ONNX bytes. Without ``spread`` the BatchNorms keep their initial (equal)
    parameters, which the exporter shares through Identity nodes: ShuffleNet's 52."""
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).eval()
    with torch.no_grad():
        for mod in m.modules() if spread else ():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
                mod.running_mean.uniform_(-0.3, 0.3)
                mod.running_var.uniform_(0.5, 2.0)
    f = io.BytesIO()
    # PRESERVE keeps BatchNormalization nodes; by default the exporter folds them itself
    kw = {"training": torch.onnx.TrainingMode.PRESERVE} if keep_bn else {}
    torch.onnx.export(m, torch.randn(2, 3, 32, 32), f, opset_version=17, dynamo=False, **kw)
    return f.getvalue()


def _plan_and_output(proto, x):
    m = sg_onnx.load(proto)
    m.eval()
    return m.plan_for(x), m(x).data.copy()


def _optimised_and_not(proto, monkeypatch):
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    plan, y = _plan_and_output(proto, x)
    with monkeypatch.context() as mp:
        mp.setattr(comp, "optimize_for_inference", lambda g, device="cpu", weight_copies=True: {})
        plan0, y0 = _plan_and_output(proto, x)
    before, after = Counter(n.type for n in plan0.nodes), Counter(n.type for n in plan.nodes)
    print(f"{len(plan0.nodes)} -> {len(plan.nodes)} nodes; removed {dict(before - after)}; "
          f"max |y - y0| / max |y0| = {np.abs(y - y0).max() / np.abs(y0).max():.2e}")
    return plan, y, before, after, y0


@pytest.mark.parametrize("name, fused", [
    ("shufflenet_v2_x0_5", "Conv2d+ReLU"),
    ("mobilenet_v2", "Conv2d+ReLU6")])
def test_without_batchnorms_the_optimised_model_is_bit_for_bit(name, fused, monkeypatch):
    """Bit for bit without the channels-last layout and the direct convs and products
    (which sum in another order); with them, within float32 rounding."""
    proto = _export(name, keep_bn=False, spread=name != "shufflenet_v2_x0_5")
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    nhwc_plan, y_nhwc = _plan_and_output(proto, x)
    with monkeypatch.context() as mp:
        mp.setattr(layout, "channels_last", lambda g, weight_copies=True: 0)
        mp.setattr(direct, "direct_convs", lambda g, weight_copies=True: 0)  # another summation order too,
        mp.setattr(direct, "direct_matmuls", lambda g, weight_copies=True: 0)  # as for the classifier's Gemm
        plan, y, before, after, y0 = _optimised_and_not(proto, monkeypatch)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_allclose(y_nhwc, y0, rtol=0, atol=1e-5 * np.abs(y0).max())
    if name == "mobilenet_v2":  # one chain to the pool: one transpose in, none out
        types = Counter(n.type for n in nhwc_plan.nodes)
        # the stem and, with 64-byte vectors, the first depthwise conv (32 channels at
        # 16x16, stride 1: faster on planes there, layout_kinds.PLANE_MAX_CHANNELS) stay NCHW
        planes = host.vector_bytes() >= 64
        # (the last pointwise convs, over few pixels with large weights, on the dense tiles)
        assert types["Conv2dNHWC"] + types["Conv2dDirectNHWC"] == 51 - planes, types
        assert types["Conv2d"] == 1 + planes, types
        assert types["Transpose"] == 1, types
    assert after["Identity"] == 0
    if name == "shufflenet_v2_x0_5":
        assert before["Identity"] == 52
    assert fused in {n.op.label for n in plan.nodes}


@pytest.mark.parametrize("name, fused", [
    ("resnet18", "Conv2dDirectNHWC+BatchNorm+Add+ReLU"),  # direct, channels-last (layout.py)
    ("mobilenet_v3_small", "Conv2d+BatchNorm+HardSwish")])
def test_imported_model_matches_unoptimised(name, fused, monkeypatch):
    plan, y, before, after, y0 = _optimised_and_not(_export(name), monkeypatch)
    assert after["BatchNorm2d"] == 0 and before["BatchNorm2d"] > 0
    assert after["Identity"] == 0
    assert fused in {n.op.label for n in plan.nodes}
    # the folding bound of one convolution, here over 20-50 of them (measured: 2-5e-7)
    np.testing.assert_allclose(y, y0, rtol=0, atol=1e-4 * np.abs(y0).max())
