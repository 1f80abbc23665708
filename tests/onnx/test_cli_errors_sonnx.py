"""The export/import commands, clear errors for bad files, SINGA's sonnx names and
Model.save/Model.load."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from singa_graph import autograd, cli, layer, opt, random as sg_random, sonnx, tensor, zoo
from singa_graph import onnx as sonnx_io
from singa_graph.errors import ModelFormatError, ShapeError, UnsupportedOpError

RNG = np.random.default_rng(0)


def test_cli_export_then_import_and_fine_tune(tmp_path, capsys):
    path = str(tmp_path / "mlp.onnx")
    assert cli.main(["export", "mlp", "-o", path]) == 0
    assert "wrote" in capsys.readouterr().out
    data = tmp_path / "data.npz"
    np.savez(data, x=RNG.standard_normal((32, 64)).astype(np.float32),
             y=RNG.integers(0, 10, 32))
    tuned = str(tmp_path / "tuned.onnx")
    assert cli.main(["import", path, "--batch-size", "8", "--train", str(data), "--epochs", "2",
                     "-o", tuned]) == 0
    out = capsys.readouterr().out
    assert "ops: Add x3, MatMul x3, Relu x2" in out and "input  input0: ('N', 64)" in out
    assert "memory report:" in out and "arena" in out and "epoch 1: mean loss" in out
    onnx.checker.check_model(onnx.load(tuned), full_check=True)


def test_cli_import_reports_a_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model at all")
    assert cli.main(["import", str(bad)]) == 1
    assert "not an ONNX model" in capsys.readouterr().err


def _exported(tmp_path):
    sg_random.seed(0)
    m = zoo.MLP(hidden=(16,))
    m.compile([np.zeros((2, 8), np.float32)], is_train=False)
    path = tmp_path / "m.onnx"
    sonnx_io.export(m, path, dynamic_batch=True)
    return path


def test_truncated_file(tmp_path):
    path = _exported(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ModelFormatError, match="truncated or malformed|invalid ONNX model"):
        sonnx_io.load(str(path))


@pytest.mark.parametrize("content", [bytes(RNG.integers(0, 256, 4000, dtype=np.uint8)),
                                     b"", b"hello, I am a text file\n"])
def test_random_bytes_and_non_onnx_files(tmp_path, content):
    path = tmp_path / "x.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelFormatError):
        sonnx_io.load(str(path))


def test_missing_file():
    with pytest.raises(ModelFormatError, match="cannot read"):
        sonnx_io.load("/nonexistent/model.onnx")


def test_every_unsupported_op_is_named_at_once():
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Bernoulli", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("RandomUniformLike", ["b"], ["c"]),
             helper.make_node("RandomNormalLike", ["c"], ["d"]),
             helper.make_node("Bernoulli", ["d"], ["y"])]
    g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [2])],
                          [vi("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError) as e:
        sonnx_io.load(m)
    msg = str(e.value)
    assert "3 op type(s)" in msg and all(
        t in msg for t in ("Bernoulli (x2)", "RandomUniformLike", "RandomNormalLike"))
    assert "Relu" not in msg


def test_wrong_input_shape(tmp_path):
    path = str(_exported(tmp_path))
    im = sonnx_io.load(path)
    with pytest.raises(ShapeError, match=r"has shape \(2, 9\), the model expects \('\?', 8\)"):
        im(np.zeros((2, 9), np.float32))
    with pytest.raises(ShapeError, match="expects"):
        sonnx.prepare(onnx.load(path)).run([np.zeros((2, 8, 1), np.float32)])


def test_sonnx_to_onnx_prepare_and_run_in_eager_mode():
    sg_random.seed(0)
    autograd.training = False
    x = tensor.from_numpy(RNG.standard_normal((3, 5)).astype(np.float32))
    lin1, lin2 = layer.Linear(4), layer.Linear(2)
    h = autograd.relu(lin1(x))
    y1, y2 = lin2(h), autograd.sigmoid(h)
    proto = sonnx.to_onnx([x], [y1, y2], model_name="two")
    assert proto.graph.name == "two" and len(proto.graph.output) == 2
    rep = sonnx.prepare(proto, device="CPU")
    outs = rep.run([x.to_numpy()])
    assert np.abs(outs[0] - y1.to_numpy()).max() < 1e-6
    assert np.abs(outs[1] - y2.to_numpy()).max() < 1e-6
    assert isinstance(sonnx.SingaBackend(), onnx.backend.base.Backend)
    autograd.training = True


def test_sonnx_model_transfer_learning_with_last_layers(tmp_path):
    base = onnx.load(str(_exported(tmp_path)))  # MatMul, Add, Relu, MatMul, Add

    class MyModel(sonnx.SONNXModel):
        def __init__(self, onnx_model):
            super().__init__(onnx_model, last_layers=-2)  # drop the head's MatMul and Add
            self.linear = layer.Linear(3)

        def forward(self, x):
            return self.linear(super().forward(x))

    m = MyModel(base)
    m.set_optimizer(opt.SGD(lr=0.1))
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    y = RNG.integers(0, 3, 4).astype(np.int32)
    m.compile([x], is_train=True)
    assert m(x, y)[0].shape == (4, 3)
    losses = [m(x, y)[1].to_numpy().item() for _ in range(4)]
    assert losses[-1] < losses[0]
    assert "linear.W" in m.get_params() and len(m.get_params()) == 4


def test_model_save_and_load_with_states(tmp_path):
    sg_random.seed(0)
    a = zoo.CNN(channels=(4, 8))
    x = RNG.standard_normal((2, 1, 12, 12)).astype(np.float32)
    a.compile([x], is_train=False)
    path = str(tmp_path / "cnn.zip")
    a.save(path, state={"epoch": 3, "lr": np.float32(0.1)})
    sg_random.seed(5)
    b = zoo.CNN(channels=(4, 8))
    b.compile([x], is_train=False)
    assert np.abs(b(x).to_numpy() - a(x).to_numpy()).max() > 1e-4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        states = b.load(path, include_state=True)
    assert int(states["epoch"]) == 3
    assert np.abs(b(x).to_numpy() - a(x).to_numpy()).max() < 1e-6
    c = zoo.MLP(hidden=(4,))
    c.compile([np.zeros((2, 144), np.float32)], is_train=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert c.load(path) is None
    said = " ".join(str(w.message) for w in caught)
    assert "not in the model, ignored" in said and "left as they are" in said
