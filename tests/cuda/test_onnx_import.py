"""Imported ONNX models run and train on the CUDA device: the constants the import functions
make (scalars, masks, index tables) move to the model's device with its parameters."""
import numpy as np
from onnx import helper

from singa_graph import onnx as sonnx_io
from singa_graph import opt
from tests.onnx.test_import_attention import B, _f32, _key_padding, _self_attention


def _attention_model_and_feeds():
    m = _self_attention(B, 1)  # 3-D grouped-query Attention, causal, boolean mask
    x = _f32(2, 6, 32)
    mask = _key_padding(2, B)
    mask[1, :, 2, :] = False  # a query row that sees no key: zeroed through a Where
    return m, [x, mask]


def test_imported_attention_runs_on_the_device(gpu):
    m, feeds = _attention_model_and_feeds()
    want = sonnx_io.load(m)(*feeds).to_numpy()
    got = sonnx_io.load(m, device=gpu)(*feeds).to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_imported_model_with_constants_trains_on_the_device(gpu):
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Celu", ["h"], ["y"], alpha=2.0)],  # scalar constants inside
        "g", [vi("x", 1, ["batch", 4])], [vi("y", 1, ["batch", 3])],
        [helper.make_tensor("w", 1, [4, 3], _f32(4, 3).ravel())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x, y = _f32(2, 4), np.array([0, 2], np.int32)
    losses = []
    for device in (None, gpu):
        im = sonnx_io.load(m, device=device)
        im.set_optimizer(opt.SGD(lr=0.1))
        im.compile([x], is_train=True, use_graph=True)
        losses.append([float(im(x, y)[1].to_numpy().ravel()[0]) for _ in range(3)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
