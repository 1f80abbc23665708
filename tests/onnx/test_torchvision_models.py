"""Small torchvision models exported by torch.onnx (opset 17, symbolic batch) import and
match onnxruntime; an imported model trains as the same torch model does.

The models and their export are bench/torchvision_models.py's (random weights, BatchNorm
statistics with a spread). Skipped where torchvision is not installed (``make torch``
installs it).
"""
from __future__ import annotations


import numpy as np
import pytest

from singa_graph import onnx as sonnx_io
from singa_graph import opt
from tests.helpers import torchvision_models

tvm = torchvision_models()


def _export(name, image, tmp_path, keep_batchnorm=False):
    return tvm.export(tvm.build(name, image=image), str(tmp_path / f"{name}.onnx"),
                      image=image, keep_batchnorm=keep_batchnorm)


# ViT and Swin bring LayerNormalization, Erf (GELU), MatMul attention with Softmax, and
# Swin's torch.roll as Slice/Concat and its shifted-window mask
# (squeezenet is imported by the training test below)
@pytest.mark.parametrize("name,image", [("shufflenet_v2_x0_5", 32), ("mobilenet_v3_small", 32),
                                        ("vit_small", 32), ("swin_small", 32)])
def test_inference_matches_onnxruntime(name, image, tmp_path):
    import onnxruntime as ort

    path = _export(name, image, tmp_path)
    x = np.random.default_rng(0).standard_normal((3, 3, image, image)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    got = sonnx_io.load(path)(x).to_numpy()
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_imported_model_trains_as_torch(tmp_path):
    """Two SGD-momentum steps of the imported squeezenet give torch's losses (its eval export
    has no Dropout, so torch's is switched off)."""
    import torch

    name, image = "squeezenet1_1", 64
    path = _export(name, image, tmp_path, keep_batchnorm=True)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, image, image)).astype(np.float32)
    y = rng.integers(0, 1000, 2).astype(np.int32)

    m = sonnx_io.load(path)
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    m.compile([x], is_train=True, use_graph=True)
    ours = [float(m(x, y)[1].to_numpy().ravel()[0]) for _ in range(2)]

    tm = tvm.build(name, image=image).train()
    for mod in tm.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    sgd = torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
    theirs = []
    for _ in range(2):
        sgd.zero_grad()
        loss = torch.nn.functional.cross_entropy(tm(torch.from_numpy(x)),
                                                 torch.from_numpy(y).long())
        loss.backward()
        sgd.step()
        theirs.append(float(loss.detach()))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
