"""singa_graph.layer / initializer: naming, params and states, lazy initialisation on
Placeholders, forward values against numpy, train/eval behaviour."""
import numpy as np
import pytest

from singa_graph import autograd, initializer, layer, tensor
from singa_graph.errors import CheckpointError, ShapeError
from singa_graph.ir import Parameter, Placeholder
from singa_graph.random import seed

rng = np.random.default_rng(0)


@pytest.fixture
def training():
    """Run with autograd.training = True and restore the flag afterwards."""
    old = autograd.training
    autograd.training = True
    yield
    autograd.training = old


class ConvBlock(layer.Layer):
    def __init__(self, c):
        super().__init__()
        self.conv = layer.Conv2d(c, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class Net(layer.Layer):
    def __init__(self):
        super().__init__()
        self.block1 = ConvBlock(4)
        self.layers = [layer.Conv2d(6, 1, bias=False), layer.ReLU()]
        self.flat = layer.Flatten()
        self.fc = layer.Linear(5)

    def forward(self, x):
        y = self.block1(x)
        for lyr in self.layers:
            y = lyr(y)
        return self.fc(self.flat(y))


def conv_ref(x, w, b=None, stride=1, pad=0, groups=1):
    """Direct NCHW convolution in numpy (cross-correlation, as every DL library)."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    ho, wo = (h - kh) // stride + 1, (wd - kw) // stride + 1
    y = np.zeros((n, o, ho, wo))
    og = o // groups
    for oc in range(o):
        g = oc // og
        xs = x[:, g * cg:(g + 1) * cg]
        for i in range(ho):
            for j in range(wo):
                patch = xs[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
                y[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return y if b is None else y + b[None, :, None, None]


# ---------------------------------------------------------------------- naming, params
def test_hierarchical_names_including_lists():
    net = Net()
    net(tensor.from_numpy(rng.standard_normal((2, 3, 5, 5)).astype(np.float32)))
    params = net.get_params()
    assert list(params) == ["block1.conv.W", "block1.conv.b", "block1.bn.scale",
                            "block1.bn.bias", "layers.0.W", "fc.W", "fc.b"]
    assert all(isinstance(p, Parameter) and p.stores_grad for p in params.values())
    assert all(p.name == n for n, p in params.items())  # the tensors carry the names
    assert params["block1.conv.W"].shape == (4, 3, 3, 3)
    assert params["layers.0.W"].shape == (6, 4, 1, 1)
    assert params["fc.W"].shape == (6 * 5 * 5, 5)
    assert net.block1.conv.name == "block1.conv" and net.name is None
    states = net.get_states()
    assert set(states) - set(params) == {"block1.bn.running_mean", "block1.bn.running_var"}
    assert not states["block1.bn.running_mean"].requires_grad


def test_sub_layer_get_params_keeps_full_names():
    net = Net()
    net(Placeholder((1, 3, 4, 4)))
    assert list(net.block1.get_params()) == ["block1.conv.W", "block1.conv.b",
                                             "block1.bn.scale", "block1.bn.bias"]


def test_get_set_params_and_states_round_trip():
    x = tensor.from_numpy(rng.standard_normal((2, 3, 4, 4)).astype(np.float32))
    a, b = Net(), Net()
    a(x)
    b(x)
    sa = {k: tensor.to_numpy(v) for k, v in a.get_states().items()}
    sa["block1.bn.running_mean"] += 1.5
    b.set_states(sa)
    for k, v in b.get_states().items():
        np.testing.assert_array_equal(v.data, sa[k])
    # set_params takes Tensors as well, and leaves unnamed params alone
    w = tensor.from_numpy(np.zeros((5,), np.float32))
    b.set_params({"fc.b": w})
    assert not b.fc.b.data.any()
    with pytest.raises(CheckpointError, match="fc.W"):
        b.set_params({"fc.W": np.zeros((3, 3))})
    with pytest.raises(CheckpointError, match="missing"):
        b.set_params({"fc.b": w}, strict=True)


def test_uninitialised_layers_have_no_params():
    net = Net()
    assert net.get_params() == {}


# ---------------------------------------------------------------------- lazy init
def test_lazy_init_on_placeholder_gives_symbolic_outputs_and_concrete_params():
    net = Net()
    x = Placeholder((8, 3, 6, 6))
    y = net(x)
    assert y.shape == (8, 5) and y.data is None and y.creator is not None
    for name, p in net.get_params().items():
        assert p.data is not None and p.data.shape == p.shape, name
    assert net.block1.bn.running_var.data is not None
    assert net.fc.in_features == 6 * 6 * 6


def test_init_inside_graph_building_is_eager():
    """While a graph is being built even concrete inputs give symbolic outputs, but the
    parameters a layer creates on its first call still hold data."""
    from singa_graph.ir import building

    net = Net()
    with building():
        y = net(tensor.from_numpy(np.ones((2, 3, 4, 4), np.float32)))
    assert y.data is None
    assert all(t.data is not None and t.creator is None for t in net.get_states().values())


def test_register_layers_and_buffers():
    class Custom(layer.Layer):
        def __init__(self):
            super().__init__()
            self.register_layers(layer.Linear(3), layer.ReLU())

        def initialize(self, x):
            self.register_buffer("count", tensor.Tensor((1,), requires_grad=False))
            self.scale = tensor.Tensor((1,), requires_grad=True, stores_grad=True)
            self.scale.set_value(2.0)

        def forward(self, x):
            return autograd.mul(self._layers["Linear_0"](x), self.scale)

    c = Custom()
    assert c(Placeholder((2, 4))).shape == (2, 3)
    assert list(c.get_params()) == ["scale", "Linear_0.W", "Linear_0.b"]
    assert "count" in c.get_states() and "count" not in c.get_params()
    assert layer.GlobalAvgPool2d()(Placeholder((2, 5, 3, 3))).shape == (2, 5, 1, 1)


def test_linear_forms_and_declared_size_check():
    x = Placeholder((4, 7))
    assert layer.Linear(3)(x).shape == (4, 3)
    lin = layer.Linear(7, 3, bias=False)  # SINGA 2 form
    assert lin(x).shape == (4, 3) and list(lin.get_params()) == ["W"]
    assert layer.Linear(in_features=7, out_features=2)(x).shape == (4, 2)
    with pytest.raises(ShapeError, match="7"):
        layer.Linear(5, 3)(x)
    img = layer.Linear(10)  # images are flattened to (N, C*H*W) first
    assert img(Placeholder((4, 1, 8, 8))).shape == (4, 10) and img.W.shape == (64, 10)
    with pytest.raises(ShapeError, match="features"):
        layer.Linear(3)(Placeholder((4,)))


def test_conv_forms_and_checks():
    x = Placeholder((2, 3, 9, 9))
    assert layer.Conv2d(8, 3)(x).shape == (2, 8, 7, 7)  # SINGA 3
    assert layer.Conv2d(3, 8, 3, 2, 1)(x).shape == (2, 8, 5, 5)  # SINGA 2 positional
    assert layer.Conv2d(in_channels=3, out_channels=4, kernel_size=3)(x).shape == (2, 4, 7, 7)
    assert layer.Conv2d(4, 3, stride=2, pad_mode="SAME_UPPER")(x).shape == (2, 4, 5, 5)
    with pytest.raises(ShapeError, match="input channels"):
        layer.Conv2d(4, 8, 3)(x)


# ---------------------------------------------------------------------- values
def test_linear_forward_matches_numpy():
    x = rng.standard_normal((5, 4)).astype(np.float32)
    lin = layer.Linear(3)
    y = lin(tensor.from_numpy(x))
    ref = x @ lin.W.data + lin.b.data
    np.testing.assert_allclose(tensor.to_numpy(y), ref, rtol=1e-5, atol=1e-6)
    assert lin.W.shape == (4, 3)  # SINGA layout (in, out)


@pytest.mark.parametrize("stride,pad,groups", [(1, 0, 1), (2, 1, 1), (1, 1, 2)])
def test_conv2d_forward_matches_numpy(stride, pad, groups):
    x = rng.standard_normal((2, 4, 7, 7)).astype(np.float32)
    conv = layer.Conv2d(6, 3, stride=stride, padding=pad, group=groups)
    y = conv(tensor.from_numpy(x))
    conv.b.data[:] = rng.standard_normal(6)
    y = conv(tensor.from_numpy(x))
    assert conv.W.shape == (6, 4 // groups, 3, 3)
    ref = conv_ref(x.astype(np.float64), conv.W.data.astype(np.float64), conv.b.data,
                   stride, pad, groups)
    np.testing.assert_allclose(tensor.to_numpy(y), ref, rtol=1e-4, atol=1e-4)


def test_separable_conv_is_depthwise_then_pointwise():
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    sep = layer.SeparableConv2d(3, 5, 3, padding=1)  # SINGA 2 form
    y = sep(tensor.from_numpy(x))
    assert list(sep.get_params()) == ["depthwise_conv.W", "point_conv.W"]
    dw, pw = sep.depthwise_conv.W.data, sep.point_conv.W.data
    assert dw.shape == (3, 1, 3, 3) and pw.shape == (5, 3, 1, 1)
    ref = conv_ref(conv_ref(x, dw, pad=1, groups=3), pw)
    np.testing.assert_allclose(tensor.to_numpy(y), ref, rtol=1e-4, atol=1e-4)


def test_pooling_layers_match_numpy():
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    mx = tensor.to_numpy(layer.MaxPool2d(2)(tensor.from_numpy(x)))
    av = tensor.to_numpy(layer.AvgPool2d(2, 2)(tensor.from_numpy(x)))
    blocks = x.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 2, 2, 2, 4)
    np.testing.assert_allclose(mx, blocks.max(-1), rtol=1e-6)
    np.testing.assert_allclose(av, blocks.mean(-1), rtol=1e-5)


def test_batchnorm_follows_autograd_training(training):
    x = (rng.standard_normal((8, 3, 4, 4)) * 2 + 1).astype(np.float32)
    bn = layer.BatchNorm2d(3)
    y = tensor.to_numpy(bn(tensor.from_numpy(x)))
    m, v = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    ref = (x - m[None, :, None, None]) / np.sqrt(v[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-4)
    assert not np.allclose(bn.running_mean.data, 0)  # updated in training
    rm, rv = bn.running_mean.data.copy(), bn.running_var.data.copy()
    autograd.training = False
    y = tensor.to_numpy(bn(tensor.from_numpy(x)))
    ref = (x - rm[None, :, None, None]) / np.sqrt(rv[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-4)
    np.testing.assert_array_equal(bn.running_mean.data, rm)  # untouched in eval


def test_dropout_follows_autograd_training(training):
    x = tensor.from_numpy(np.ones((100, 100), np.float32))
    drop = layer.Dropout(0.5)
    y = tensor.to_numpy(drop(x))
    assert 0.3 < (y == 0).mean() < 0.7 and set(np.unique(y)) <= {0.0, 2.0}
    autograd.training = False
    np.testing.assert_array_equal(tensor.to_numpy(drop(x)), x.data)


def test_parameter_free_layers():
    a = tensor.from_numpy(np.array([[-1.0, 2.0]], np.float32))
    np.testing.assert_allclose(tensor.to_numpy(layer.ReLU()(a)), [[0, 2]])
    np.testing.assert_allclose(tensor.to_numpy(layer.Add()(a, a)), [[-2, 4]])
    np.testing.assert_allclose(tensor.to_numpy(layer.Cat(1)([a, a])), [[-1, 2, -1, 2]])
    np.testing.assert_allclose(tensor.to_numpy(layer.Sigmoid()(a)), 1 / (1 + np.exp([[1, -2]])),
                               rtol=1e-6)
    t = tensor.from_numpy(np.array([1], np.int32))
    ref = np.log(np.exp([-1, 2]).sum()) - 2
    assert layer.SoftMaxCrossEntropy()(a, t).data.item() == pytest.approx(ref, rel=1e-5)
    assert layer.Flatten()(Placeholder((2, 3, 4))).shape == (2, 12)


# ---------------------------------------------------------------------- initialisers
def test_initializers_statistics_and_seeding():
    t = tensor.Tensor((400, 300))
    seed(1)
    initializer.he_uniform(t)
    first = t.data.copy()
    assert abs(t.data.max() - np.sqrt(6 / 400)) < 1e-3
    seed(1)
    initializer.he_uniform(t)
    np.testing.assert_array_equal(first, t.data)
    initializer.he_normal(t)
    assert t.data.std() == pytest.approx(np.sqrt(2 / 400), rel=0.05)
    initializer.glorot_normal(t)
    assert t.data.std() == pytest.approx(np.sqrt(2 / 700), rel=0.05)
    initializer.xavier_uniform(t)
    assert abs(t.data.max() - np.sqrt(6 / 700)) < 1e-3
    c = tensor.Tensor((64, 16, 3, 3))  # conv fans: in = 16*9, out = 64*9
    assert initializer.compute_fans(c.shape) == (144.0, 576.0)
    initializer.gaussian(c, std=0.5)
    assert c.data.std() == pytest.approx(0.5, rel=0.05)
    assert initializer.get("he_uniform") is initializer.he_uniform
    with pytest.raises(ValueError, match="unknown initializer"):
        initializer.get("nope")


def test_layer_init_is_seeded():
    seed(7)
    a = layer.Linear(4)
    a(Placeholder((2, 3)))
    seed(7)
    b = layer.Linear(4)
    b(Placeholder((2, 3)))
    np.testing.assert_array_equal(a.W.data, b.W.data)
    assert a.W.data.std() > 0 and not a.b.data.any()
