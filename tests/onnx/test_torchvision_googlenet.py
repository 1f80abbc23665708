"""torchvision's GoogLeNet, exported by torch.onnx, imports and matches onnxruntime.

Its max poolings are written with ``ceil_mode=1`` and partial last windows. Skipped where
torchvision is not installed (it is in the ``bench`` extra).
"""
from __future__ import annotations

import io

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")

from tests.helpers import torchvision_models  # noqa: E402


def _torchvision():
    return torchvision_models().import_torchvision()


def test_googlenet_matches_onnxruntime():
    import onnx

    from singa_graph import onnx as sonnx

    tv = _torchvision()
    torch.manual_seed(0)
    net = tv.models.googlenet(weights=None, aux_logits=False, init_weights=True).eval()
    x = torch.randn(2, 3, 64, 64)
    buf = io.BytesIO()
    # without constant folding the export is faster, and BatchNormalization stays a node
    torch.onnx.export(net, (x,), buf, opset_version=17, dynamo=False,
                      do_constant_folding=False)
    proto = onnx.load_from_string(buf.getvalue())
    ceil = [n for n in proto.graph.node if n.op_type == "MaxPool"
            and any(a.name == "ceil_mode" and a.i == 1 for a in n.attribute)]
    assert ceil, "the export has no ceil_mode=1 MaxPool left to test"
    xs = x.numpy()
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: xs})[0]
    got = sonnx.load(proto)(xs).to_numpy()
    assert got.shape == want.shape == (2, 1000)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
