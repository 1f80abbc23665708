"""Export of the example models, checked against onnxruntime on the same input."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from singa_graph import autograd, cli, layer, model, ops, random as sg_random, zoo
from singa_graph import onnx as sonnx_io
from singa_graph.errors import UnsupportedOpError


def _ort(proto, *xs):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})


def _xception():
    ex = cli.load_example("xception")
    cfg = dict(ex.SMALL, middle=1)
    size = cfg.pop("size")
    return ex.XceptionModel(num_classes=10, in_channels=3, image_size=size, **cfg), \
        (3, 3, size, size)


MODELS = {
    "mlp": lambda: (zoo.MLP(hidden=(32, 16)), (3, 64)),
    "cnn": lambda: (zoo.CNN(), (3, 1, 28, 28)),
    "resnet": lambda: (zoo.ResNet(widths=(8, 16)), (3, 1, 16, 16)),
    "xception": _xception,
}


def _trained_a_little(name):
    """The example model after one SGD step, so BatchNorm statistics are not 0 and 1."""
    from singa_graph import opt

    sg_random.seed(1)
    m, shape = MODELS[name]()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    m.compile([x], is_train=True, use_graph=True)
    m(x, rng.integers(0, 10, shape[0]).astype(np.int32))
    m.eval()
    return m, x


@pytest.mark.parametrize("name", list(MODELS))
def test_example_models_match_onnxruntime(name, tmp_path):
    m, x = _trained_a_little(name)
    ours = m(x).to_numpy()
    path = tmp_path / f"{name}.onnx"
    proto = sonnx_io.export(m, path, dynamic_batch=True)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert 17 <= proto.opset_import[0].version and proto.ir_version <= 13
    assert {t.name for t in proto.graph.initializer} <= set(m.get_states())
    (theirs,) = _ort(proto, x)
    assert np.abs(theirs - ours).max() < 1e-4
    # the symbolic batch: another batch size runs in onnxruntime too
    x5 = np.concatenate([x, x[:2]])
    (t5,) = _ort(proto, x5)
    assert t5.shape[0] == 5 and np.abs(t5[:3] - theirs).max() < 1e-4


def test_batchnorm_momentum_and_dropout_are_inference_forms():
    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.conv = layer.Conv2d(4, 3, padding=1)
            self.bn = layer.BatchNorm2d(momentum=0.2)
            self.drop = layer.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.bn(self.conv(x)))

    m = Net()
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 5)).astype(np.float32)
    m.compile([x], is_train=False)
    proto = sonnx_io.export(m)
    types = [n.op_type for n in proto.graph.node]
    assert "Dropout" not in types
    bn = next(n for n in proto.graph.node if n.op_type == "BatchNormalization")
    momentum = next(a.f for a in bn.attribute if a.name == "momentum")
    assert momentum == pytest.approx(0.8)  # ONNX weights the running value: 1 - ours
    assert len(bn.output) == 1
    assert np.abs(_ort(proto, x)[0] - m(x).to_numpy()).max() < 1e-5


def test_several_outputs_and_names():
    class TwoHeads(model.Model):
        def __init__(self):
            super().__init__()
            self.body = layer.Linear(8)
            self.a, self.b = layer.Linear(3), layer.Linear(2)

        def forward(self, x):
            h = autograd.relu(self.body(x))
            return self.a(h), ops.softmax(self.b(h))

    m = TwoHeads()
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    m.compile([x], is_train=False)
    proto = sonnx_io.export(m, input_names=["features"], output_names=["scores", "probs"])
    assert [i.name for i in proto.graph.input] == ["features"]
    assert [o.name for o in proto.graph.output] == ["scores", "probs"]
    ours = m(x)
    for a, b in zip(_ort(proto, x), ours):
        assert np.abs(a - b.to_numpy()).max() < 1e-5


def test_export_rejects_loss_ops_and_bad_opsets():
    from singa_graph.ir import Graph, Placeholder

    x = Placeholder((2, 3), name="x")
    t = Placeholder((2,), np.int32, name="t")
    g = Graph([ops.softmax_cross_entropy(x, t)], inputs=[x, t])
    with pytest.raises(UnsupportedOpError, match="SoftmaxCrossEntropy"):
        sonnx_io.export(g)
    with pytest.raises(ValueError, match="opset"):
        sonnx_io.export(Graph([ops.relu(x)], inputs=[x]), opset=11)


@pytest.mark.parametrize("opset", [17, 18, onnx.defs.onnx_opset_version() - 5])
def test_reductions_and_split_at_several_opsets(opset):
    from singa_graph.ir import Graph, Placeholder

    x = Placeholder((2, 6), name="x")
    a, b = ops.split(x, 1, [2, 4])
    y = ops.add(ops.mean(b, 1, True), ops.sum(a, (1,), True))
    proto = sonnx_io.export(Graph([y], inputs=[x]), opset=opset)
    xv = np.arange(12, dtype=np.float32).reshape(2, 6)
    want = xv[:, 2:].mean(1, keepdims=True) + xv[:, :2].sum(1, keepdims=True)
    assert np.abs(_ort(proto, xv)[0] - want).max() < 1e-5
