"""Models in the style of the ONNX model zoo's that SINGA's ONNX examples run, each built
with torch.nn (random weights, BatchNorm statistics with a spread), exported by torch.onnx
(opset 17, symbolic batch) and matched against onnxruntime at two batch sizes:

* tiny-YOLOv2: Conv, BatchNorm, LeakyReLU(0.1), MaxPool 2/2 and a last MaxPool of stride 1
  with pads (0, 0, 1, 1), as the zoo's file has it (torch writes Pad + MaxPool; the test
  folds the Pad into the MaxPool's pads, the zoo's form);
* super-resolution (PyTorch's tutorial model): PixelShuffle, exported as DepthToSpace;
* an ArcFace-style ResNet (IR blocks: BN, Conv, BN, PReLU, Conv, BN, shortcut), with
  per-channel PReLU and a BatchNorm1d embedding head;
* a FER+-style CNN on 64x64 grey faces;
* a U-Net with Resize (linear) upsampling and ConvTranspose.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from singa_graph import onnx as sonnx_io
from tests.helpers import onnx_exports

ex = onnx_exports()
import torch  # noqa: E402  (after the skip when torch is missing)
from torch import nn  # noqa: E402

BATCHES = (1, 3)


def _conv_bn_leaky(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
            nn.LeakyReLU(0.1)]


class _PadMaxPool(nn.Module):
    """Darknet's size-2 stride-1 max pool: pad right and bottom by one, then pool."""

    def forward(self, x):
        return nn.functional.max_pool2d(
            nn.functional.pad(x, (0, 1, 0, 1), value=float("-inf")), 2, 1)


def tiny_yolov2():
    layers, c = [], 3
    for w in (8, 16, 32, 64):
        layers += _conv_bn_leaky(c, w) + [nn.MaxPool2d(2, 2)]
        c = w
    layers += _conv_bn_leaky(c, 64) + [_PadMaxPool()] + _conv_bn_leaky(64, 64)
    layers += [nn.Conv2d(64, 5 * (5 + 4), 1)]  # 5 anchors, 4 classes
    return nn.Sequential(*layers), (3, 64, 64)


class SuperResolution(nn.Module):
    def __init__(self, upscale=3):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 16, 3, padding=1)
        self.conv4 = nn.Conv2d(16, upscale ** 2, 3, padding=1)
        self.shuffle = nn.PixelShuffle(upscale)

    def forward(self, x):
        x = self.relu(self.conv2(self.relu(self.conv1(x))))
        return self.shuffle(self.conv4(self.relu(self.conv3(x))))


class IRBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.Conv2d(cin, cout, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(cout), nn.PReLU(cout),
                                  nn.Conv2d(cout, cout, 3, stride, 1, bias=False),
                                  nn.BatchNorm2d(cout))
        self.short = (nn.MaxPool2d(1, stride) if cin == cout else
                      nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                    nn.BatchNorm2d(cout)))

    def forward(self, x):
        return self.body(x) + self.short(x)


class ArcFaceResNet(nn.Module):
    def __init__(self, emb=32):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.PReLU(16))
        self.blocks = nn.Sequential(IRBlock(16, 16, 2), IRBlock(16, 32, 2), IRBlock(32, 32, 1),
                                    IRBlock(32, 64, 2))
        self.head = nn.Sequential(nn.BatchNorm2d(64), nn.Dropout(0.4), nn.Flatten(),
                                  nn.Linear(64 * 4 * 4, emb), nn.BatchNorm1d(emb))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def fer_plus():
    def block(cin, cout, n):
        layers = []
        for i in range(n):
            layers += [nn.Conv2d(cin if i == 0 else cout, cout, 3, padding=1), nn.ReLU()]
        return layers + [nn.MaxPool2d(2, 2), nn.Dropout(0.25)]

    return nn.Sequential(*block(1, 16, 2), *block(16, 32, 2), *block(32, 64, 3),
                         nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Dropout(0.5),
                         nn.Linear(128, 8)), (1, 64, 64)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()

        def double(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                                 nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())

        self.d1, self.d2, self.mid = double(3, 8), double(8, 16), double(16, 32)
        self.pool = nn.MaxPool2d(2)
        self.up2 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.u2 = double(32, 16)
        self.up1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.u1 = double(16 + 8, 8)
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(self.pool(a))
        m = self.mid(self.pool(b))
        y = self.u2(torch.cat([self.up2(m), b], 1))
        y = self.u1(torch.cat([self.up1(y), a], 1))
        return self.out(y)


def _fold_pad_into_maxpool(path):
    """Rewrite _PadMaxPool's Pad(-inf) -> MaxPool as one MaxPool with pads (0, 0, 1, 1),
    the zoo's tiny-YOLOv2 form; the nodes that computed the Pad's pads are dropped."""
    m = onnx.load(path)
    g = m.graph
    (pad,) = [n for n in g.node if n.op_type == "Pad"]
    (pool,) = [n for n in g.node if pad.output[0] in n.input]
    assert pool.op_type == "MaxPool"
    pool.input[0] = pad.input[0]
    del pool.attribute[:]
    pool.attribute.extend([helper.make_attribute("kernel_shape", [2, 2]),
                           helper.make_attribute("strides", [1, 1]),
                           helper.make_attribute("pads", [0, 0, 1, 1])])
    g.node.remove(pad)
    used = {x for n in g.node for x in n.input} | {o.name for o in g.output}
    while True:  # drop what only fed the Pad
        dead = [n for n in g.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for n in dead:
            g.node.remove(n)
        used = {x for n in g.node for x in n.input} | {o.name for o in g.output}
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return m


def _export(model, shape, path, keep_batchnorm=False):
    model = ex.randomise(model)
    ex.export(model, str(path), input_shape=(2,) + tuple(shape),
              keep_batchnorm=keep_batchnorm)
    return model


def _matches_ort(path, shape, torch_model=None, tol=1e-4):
    rng = np.random.default_rng(0)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    m = sonnx_io.load(str(path))
    for batch in BATCHES:
        x = rng.standard_normal((batch,) + tuple(shape)).astype(np.float32)
        want = sess.run(None, {"input": x})[0]
        got = m(x).to_numpy()
        assert got.shape == want.shape
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= tol * scale, (batch, np.abs(got - want).max(), scale)
        if torch_model is not None:  # the file computes what the torch model does
            with torch.no_grad():
                ref = torch_model(torch.from_numpy(x)).numpy()
            assert np.abs(ref - want).max() <= tol * scale
    return m


def _op_types(path):
    return {n.op_type for n in onnx.load(str(path)).graph.node}


def test_tiny_yolov2_style(tmp_path):
    net, shape = tiny_yolov2()
    path = tmp_path / "tiny_yolov2.onnx"
    net = _export(net, shape, path, keep_batchnorm=True)  # the zoo's file has them
    m = _fold_pad_into_maxpool(path)
    pools = [n for n in m.graph.node if n.op_type == "MaxPool"]
    assert any(list(a.ints) == [0, 0, 1, 1] for n in pools for a in n.attribute
               if a.name == "pads")
    assert {"LeakyRelu", "MaxPool", "Conv", "BatchNormalization"} <= _op_types(path)
    _matches_ort(path, shape, net)


def test_super_resolution_depth_to_space(tmp_path):
    path = tmp_path / "super_resolution.onnx"
    net = _export(SuperResolution(), (1, 24, 24), path)
    assert "DepthToSpace" in _op_types(path)
    _matches_ort(path, (1, 24, 24), net)


def test_arcface_style_resnet_with_prelu(tmp_path):
    path = tmp_path / "arcface.onnx"
    net = _export(ArcFaceResNet(), (3, 32, 32), path, keep_batchnorm=True)
    assert {"PRelu", "BatchNormalization"} <= _op_types(path)
    _matches_ort(path, (3, 32, 32), net)


def test_fer_plus_style_cnn(tmp_path):
    net, shape = fer_plus()
    path = tmp_path / "fer_plus.onnx"
    net = _export(net, shape, path)
    _matches_ort(path, shape, net)


def test_unet_with_linear_resize_and_conv_transpose(tmp_path):
    path = tmp_path / "unet.onnx"
    net = _export(UNet(), (3, 32, 32), path)
    assert {"Resize", "ConvTranspose", "Concat"} <= _op_types(path)
    _matches_ort(path, (3, 32, 32), net)


def test_example_runs_a_file(tmp_path, capsys):
    from singa_graph import cli

    path = tmp_path / "super_resolution.onnx"
    _export(SuperResolution(), (1, 12, 12), path)
    bad = tmp_path / "empty.onnx"
    bad.write_bytes(b"")
    ex_mod = cli.load_example("onnx_models")
    assert ex_mod.main([str(path), str(bad), "--batch-size", "2", "--repeat", "2"]) == 1
    out, err = capsys.readouterr()
    assert "opset 17" in out and "DepthToSpace x1" in out and "input  input: ('N', 1, 12, 12)" in out
    assert "inference plan for batch 2" in out and "arena" in out
    assert "singa_graph / ORT" in out and "max |ours - ORT|" in out
    assert "ModelFormatError" in err and "empty" in err
