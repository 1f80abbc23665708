"""The code examples of the SINGA autograd docs (../shared/seeds/) run on singa_graph.

Each snippet below is the seed's code verbatim, ``singa`` imports included; :func:`port`
changes only the import lines (``singa`` -> ``singa_graph``) and asserts that nothing else
changed. Where a seed leaves something undefined (its data, ``dev``, ``epochs``, ...) the test
defines the minimum in a ``FILL`` string, with small random data, and says so.

- seed 002 (Chinese autograd doc): the operation-only MLP, the layer CNN and the Model-API
  MLP with its checkpoint snippets;
- seed 003 (English autograd doc; 000 is an older version of it with the same code): the
  Xception, trained eagerly at 299x299 as written (batch 1, 1 step instead of 16 and 20)
  and compiled in graph mode on Placeholders.

The English docs (003/000) have no operation-only MLP, so there is no 003-style MLP to run.
"""
from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest


def port(src: str) -> str:
    """Change ``singa`` imports to ``singa_graph``; nothing else."""
    out = re.sub(r"^(\s*)from singa(\.| )", r"\1from singa_graph\2", src, flags=re.M)
    out = re.sub(r"^(\s*)import singa\b", r"\1import singa_graph as singa", out, flags=re.M)
    changed = [(a, b) for a, b in zip(src.splitlines(), out.splitlines()) if a != b]
    assert all("singa" in a and "import" in a for a, _ in changed), changed
    return out


def run(*snippets, ns=None):
    ns = {} if ns is None else ns
    for s in snippets:
        exec(compile(port(s), "<seed>", "exec"), ns)
    return ns


# ============================================================================ seed 002
# ---- 只使用Operation: the operation-only MLP -------------------------------------------
S002_MLP_IMPORTS = """
from singa.tensor import Tensor
from singa import autograd
from singa import opt
"""

S002_MLP_PARAMS = """
w0 = Tensor(shape=(2, 3), requires_grad=True, stores_grad=True)
w0.gaussian(0.0, 0.1)
b0 = Tensor(shape=(1, 3), requires_grad=True, stores_grad=True)
b0.set_value(0.0)

w1 = Tensor(shape=(3, 2), requires_grad=True, stores_grad=True)
w1.gaussian(0.0, 0.1)
b1 = Tensor(shape=(1, 2), requires_grad=True, stores_grad=True)
b1.set_value(0.0)
"""

S002_MLP_TRAIN = """
inputs = Tensor(data=data)  # data matrix
target = Tensor(data=label) # label vector
autograd.training = True    # for training
sgd = opt.SGD(0.05)   # optimizer

for i in range(10):
    x = autograd.matmul(inputs, w0) # matrix multiplication
    x = autograd.add_bias(x, b0)    # add the bias vector
    x = autograd.relu(x)            # ReLU activation operation

    x = autograd.matmul(x, w1)
    x = autograd.add_bias(x, b1)

    loss = autograd.softmax_cross_entropy(x, target)

    for p, g in autograd.backward(loss):
        sgd.update(p, g)
"""

# FILL (not in the seed): ``data`` and ``label`` are elided. As SINGA's
# examples/autograd/mlp.py: 2-d points, one-hot int labels "above / below the line 5x+1".
FILL_MLP_DATA = """
import numpy as np
_rng = np.random.default_rng(0)
data = _rng.uniform(-1, 1, (400, 2)).astype(np.float32)
_above = (data[:, 1] > 5 * data[:, 0] + 1).astype(np.int32)
label = np.eye(2, dtype=np.int32)[_above]
"""


def test_seed002_operation_only_mlp():
    ns = run(S002_MLP_IMPORTS, S002_MLP_PARAMS)
    params0 = [ns[k].data.copy() for k in ("w0", "b0", "w1", "b1")]
    assert params0[0].std() > 0 and not params0[1].any()  # gaussian / set_value
    run(FILL_MLP_DATA, ns=ns)

    # loss before training, for comparison
    from singa_graph import autograd
    from singa_graph.tensor import Tensor
    x0 = autograd.add_bias(autograd.matmul(autograd.relu(autograd.add_bias(
        autograd.matmul(Tensor(data=ns["data"]), ns["w0"]), ns["b0"])), ns["w1"]), ns["b1"])
    loss0 = autograd.softmax_cross_entropy(x0, Tensor(data=ns["label"])).data.item()

    run(S002_MLP_TRAIN, ns=ns)
    loss = ns["loss"].data.item()
    assert np.isfinite(loss) and loss < loss0, (loss0, loss)
    for p0, k in zip(params0, ("w0", "b0", "w1", "b1")):
        assert ns[k].shape == p0.shape and not np.array_equal(ns[k].data, p0)


# ---- 使用Operation和Layer: the layer CNN ------------------------------------------------
S002_CNN_LAYERS = """
conv1 = autograd.Conv2d(1, 32, 3, padding=1, bias=False)
bn1 = autograd.BatchNorm2d(32)
pooling1 = autograd.MaxPool2d(3, 1, padding=1)
conv21 = autograd.Conv2d(32, 16, 3, padding=1)
conv22 = autograd.Conv2d(32, 16, 3, padding=1)
bn2 = autograd.BatchNorm2d(32)
linear = autograd.Linear(32 * 28 * 28, 10)
pooling2 = autograd.AvgPool2d(3, 1, padding=1)
"""

S002_CNN_FORWARD = """
def forward(x, t):
    # x is the input data (a batch of images)
    # t is the label vector (a batch of integers)
    y = conv1(x)           # Conv layer
    y = autograd.relu(y)   # ReLU operation
    y = bn1(y)             # BN layer
    y = pooling1(y)        # Pooling Layer

    # two parallel convolution layers
    y1 = conv21(y)
    y2 = conv22(y)
    y = autograd.cat((y1, y2), 1)  # cat operation
    y = autograd.relu(y)           # ReLU operation
    y = bn2(y)
    y = pooling2(y)

    y = autograd.flatten(y)        # flatten operation
    y = linear(y)                  # Linear layer
    loss = autograd.softmax_cross_entropy(y, t)  # operation
    return loss, y
"""

S002_CNN_TRAIN = """
autograd.training = True
for epoch in range(epochs):
    for i in range(batch_number):
        inputs = tensor.Tensor(device=dev, data=x_train[
                               i * batch_sz:(1 + i) * batch_sz], stores_grad=False)
        targets = tensor.Tensor(device=dev, data=y_train[
                                i * batch_sz:(1 + i) * batch_sz], requires_grad=False, stores_grad=False)

        loss, y = forward(inputs, targets) # forward the net

        for p, gp in autograd.backward(loss):  # auto backward
            sgd.update(p, gp)
"""

# FILL (not in the seed): the imports of this snippet (it uses ``tensor``, ``autograd``) and
# everything the training loop assumes: ``dev``, ``sgd`` (the previous snippet's
# ``opt.SGD(0.05)``), ``epochs``, ``batch_number``, ``batch_sz`` and MNIST-shaped random
# data with one-hot int labels as in SINGA's examples/autograd/mnist_cnn.py.
FILL_CNN = """
from singa import autograd, device, opt, tensor
import numpy as np
dev = device.get_default_device()
sgd = opt.SGD(0.05)
epochs, batch_number, batch_sz = 1, 2, 4
_rng = np.random.default_rng(0)
x_train = _rng.standard_normal((batch_number * batch_sz, 1, 28, 28)).astype(np.float32)
y_train = np.eye(10, dtype=np.int32)[_rng.integers(0, 10, batch_number * batch_sz)]
"""


def test_seed002_layer_cnn():
    ns = run(FILL_CNN, S002_CNN_LAYERS, S002_CNN_FORWARD)
    run(S002_CNN_TRAIN, ns=ns)
    assert np.isfinite(ns["loss"].data.item())
    assert ns["y"].shape == (4, 10)
    assert ns["conv1"].W.shape == (32, 1, 3, 3)
    assert ns["linear"].W.shape == (32 * 28 * 28, 10)
    # BatchNorm ran in training mode: running statistics moved
    assert not np.array_equal(ns["bn1"].running_var.data, np.ones(32, np.float32))


# ---- Using the Model API: the Model-API MLP -----------------------------------------------
# FILL (not in the seed): the snippet's imports (model, layer, opt, tensor, device).
FILL_MODEL_IMPORTS = """
from singa import autograd, device, layer, model, opt, tensor
import numpy as np
"""

S002_MODEL_CLASS = """
class MLP(model.Model):  # the model is a subclass of Model

    def __init__(self, data_size=10, perceptron_size=100, num_classes=10):
        super(MLP, self).__init__()

        # init the operators, layers and other objects
        self.relu = layer.ReLU()
        self.linear1 = layer.Linear(perceptron_size)
        self.linear2 = layer.Linear(num_classes)
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()

    def forward(self, inputs):  # define the forward function
        y = self.linear1(inputs)
        y = self.relu(y)
        y = self.linear2(y)
        return y

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss

    def set_optimizer(self, optimizer):  # attach an optimizer
        self.optimizer = optimizer
"""

S002_MODEL_TRAIN = """
# create a model instance
model = MLP()
# initialize optimizer and attach it to the model
sgd = opt.SGD(lr=0.005, momentum=0.9, weight_decay=1e-5)
model.set_optimizer(sgd)
# input and target placeholders for the model
tx = tensor.Tensor((batch_size, 1, IMG_SIZE, IMG_SIZE), dev, tensor.float32)
ty = tensor.Tensor((batch_size, num_classes), dev, tensor.int32)
# compile the model before training
model.compile([tx], is_train=True, use_graph=True, sequential=False)

# train the model iteratively
for b in range(num_train_batch):
    # generate the next mini-batch
    x, y = ...

    # Copy the data into input tensors
    tx.copy_from_numpy(x)
    ty.copy_from_numpy(y)

    # Training with one batch
    out, loss = model(tx, ty)
"""

# FILL (not in the seed): ``batch_size``, ``IMG_SIZE``, ``num_classes``,
# ``num_train_batch``, ``dev`` and the elided mini-batch ``x, y = ...``, replaced by the
# next batch of small random data with one-hot int32 labels (the shape of ``ty``).
FILL_MODEL_DATA = """
batch_size, IMG_SIZE, num_classes, num_train_batch = 8, 28, 10, 3
dev = device.get_default_device()
_rng = np.random.default_rng(0)
_batches = iter([(_rng.standard_normal((batch_size, 1, IMG_SIZE, IMG_SIZE)).astype(np.float32),
                  np.eye(num_classes, dtype=np.int32)[_rng.integers(0, num_classes, batch_size)])
                 for _ in range(num_train_batch)])
"""
# the one elided line, ``x, y = ...``, becomes ``x, y = next(_batches)``
ELIDED_BATCH = ("x, y = ...", "x, y = next(_batches)")

S002_SAVE = """
# define the path to save the checkpoint
checkpointpath="checkpoint.zip"

# save a checkpoint
model.save_states(fpath=checkpointpath)
"""

S002_LOAD = """
# define the path to load the checkpoint
checkpointpath="checkpoint.zip"

# load a checkpoint
import os
if os.path.exists(checkpointpath):
    model.load_states(fpath=checkpointpath)
"""


def test_seed002_model_api_mlp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the seed saves to ./checkpoint.zip
    assert S002_MODEL_TRAIN.count(ELIDED_BATCH[0]) == 1
    ns = run(FILL_MODEL_IMPORTS, S002_MODEL_CLASS, FILL_MODEL_DATA)
    run(S002_MODEL_TRAIN.replace(*ELIDED_BATCH), ns=ns)
    m = ns["model"]
    assert np.isfinite(ns["loss"].data.item()) and ns["out"].shape == (8, 10)
    plan = m.last_plan
    assert plan is not None and len(m.plans) == 1, "graph mode: one compiled plan"
    assert m.schedule == "memory"  # sequential=False

    run(S002_SAVE, ns=ns)
    assert os.path.exists(tmp_path / "checkpoint.zip")
    saved = {k: t.data.copy() for k, t in m.get_states().items()}
    out, loss = m(ns["tx"], ns["ty"])  # train on: the parameters move away
    assert any(not np.array_equal(t.data, saved[k]) for k, t in m.get_states().items())
    run(S002_LOAD, ns=ns)
    for k, t in m.get_states().items():
        np.testing.assert_array_equal(t.data, saved[k], err_msg=k)
    # the bound plan sees the loaded values
    out2, loss2 = m(ns["tx"], ns["ty"])
    np.testing.assert_array_equal(out2.data, out.data)
    np.testing.assert_array_equal(loss2.data, loss.data)


# ============================================================================ seed 003
S003_IMPORTS = """
from singa import autograd
from singa import tensor
from singa import device
from singa import opt

import numpy as np
from tqdm import trange
"""

S003_BLOCK = """
class Block(autograd.Layer):

    def __init__(self, in_filters, out_filters, reps, strides=1, padding=0, start_with_relu=True, grow_first=True):
        super(Block, self).__init__()

        if out_filters != in_filters or strides != 1:
            self.skip = autograd.Conv2d(in_filters, out_filters,
                                        1, stride=strides, padding=padding, bias=False)
            self.skipbn = autograd.BatchNorm2d(out_filters)
        else:
            self.skip = None

        self.layers = []

        filters = in_filters
        if grow_first:
            self.layers.append(autograd.ReLU())
            self.layers.append(autograd.SeparableConv2d(in_filters, out_filters,
                                                        3, stride=1, padding=1, bias=False))
            self.layers.append(autograd.BatchNorm2d(out_filters))
            filters = out_filters

        for i in range(reps - 1):
            self.layers.append(autograd.ReLU())
            self.layers.append(autograd.SeparableConv2d(filters, filters,
                                                        3, stride=1, padding=1, bias=False))
            self.layers.append(autograd.BatchNorm2d(filters))

        if not grow_first:
            self.layers.append(autograd.ReLU())
            self.layers.append(autograd.SeparableConv2d(in_filters, out_filters,
                                                        3, stride=1, padding=1, bias=False))
            self.layers.append(autograd.BatchNorm2d(out_filters))

        if not start_with_relu:
            self.layers = self.layers[1:]
        else:
            self.layers[0] = autograd.ReLU()

        if strides != 1:
            self.layers.append(autograd.MaxPool2d(3, strides, padding + 1))

    def __call__(self, x):
        y = self.layers[0](x)
        for layer in self.layers[1:]:
            if isinstance(y, tuple):
                y = y[0]
            y = layer(y)

        if self.skip is not None:
            skip = self.skip(x)
            skip = self.skipbn(skip)
        else:
            skip = x
        y = autograd.add(y, skip)
        return y
"""

S003_XCEPTION = '''
class Xception(autograd.Layer):
    """
    Xception optimized for the ImageNet dataset, as specified in
    https://arxiv.org/pdf/1610.02357.pdf
    """

    def __init__(self, num_classes=1000):
        """ Constructor
        Args:
            num_classes: number of classes
        """
        super(Xception, self).__init__()
        self.num_classes = num_classes

        self.conv1 = autograd.Conv2d(3, 32, 3, 2, 0, bias=False)
        self.bn1 = autograd.BatchNorm2d(32)

        self.conv2 = autograd.Conv2d(32, 64, 3, 1, 1, bias=False)
        self.bn2 = autograd.BatchNorm2d(64)

        self.block1 = Block(
            64, 128, 2, 2, padding=0, start_with_relu=False, grow_first=True)
        self.block2 = Block(
            128, 256, 2, 2, padding=0, start_with_relu=True, grow_first=True)
        self.block3 = Block(
            256, 728, 2, 2, padding=0, start_with_relu=True, grow_first=True)

        self.block4 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block5 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block6 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block7 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)

        self.block8 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block9 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block10 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block11 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)

        self.block12 = Block(
            728, 1024, 2, 2, start_with_relu=True, grow_first=False)

        self.conv3 = autograd.SeparableConv2d(1024, 1536, 3, 1, 1)
        self.bn3 = autograd.BatchNorm2d(1536)

        # do relu here
        self.conv4 = autograd.SeparableConv2d(1536, 2048, 3, 1, 1)
        self.bn4 = autograd.BatchNorm2d(2048)

        self.globalpooling = autograd.MaxPool2d(10, 1)
        self.fc = autograd.Linear(2048, num_classes)

    def features(self, input):
        x = self.conv1(input)
        x = self.bn1(x)
        x = autograd.relu(x)

        x = self.conv2(x)
        x = self.bn2(x)
        x = autograd.relu(x)

        x = self.block1(x)
        x = self.block2(x)
        x = self.block3(x)
        x = self.block4(x)
        x = self.block5(x)
        x = self.block6(x)
        x = self.block7(x)
        x = self.block8(x)
        x = self.block9(x)
        x = self.block10(x)
        x = self.block11(x)
        x = self.block12(x)

        x = self.conv3(x)
        x = self.bn3(x)
        x = autograd.relu(x)

        x = self.conv4(x)
        x = self.bn4(x)
        return x

    def logits(self, features):
        x = autograd.relu(features)
        x = self.globalpooling(x)
        x = autograd.flatten(x)
        x = self.fc(x)
        return x

    def __call__(self, input):
        x = self.features(input)
        x = self.logits(x)
        return x
'''

S003_CREATE = """
model = Xception(num_classes=1000)
"""

S003_DATA = """
IMG_SIZE = 299
batch_size = 16
tx = tensor.Tensor((batch_size, 3, IMG_SIZE, IMG_SIZE), dev)
ty = tensor.Tensor((batch_size,), dev, tensor.int32)
x = np.random.randn(batch_size, 3, IMG_SIZE, IMG_SIZE).astype(np.float32)
y = np.random.randint(0, 1000, batch_size, dtype=np.int32)
tx.copy_from_numpy(x)
ty.copy_from_numpy(y)
"""

S003_OPT = """
niters = 20
sgd = opt.SGD(lr=0.1, momentum=0.9, weight_decay=1e-5)
"""

S003_TRAINING_FLAG = """
autograd.training = True
"""

S003_TRAIN = """
with trange(niters) as t:
        for b in t:
            x = model(tx)
            loss = autograd.softmax_cross_entropy(x, ty)
            for p, g in autograd.backward(loss):
                sgd.update(p, g)
"""

# FILL (not in the seed): ``dev`` is never defined in the doc.
FILL_DEV = """
dev = device.get_default_device()
"""
# Deviations, to keep the runtime reasonable on CPU: batch 1 instead of 16, 1 iteration
# instead of 20 (numbers only; the code is otherwise as written).
SMALL_BATCH = ("batch_size = 16", "batch_size = 1")
ONE_ITER = ("niters = 20", "niters = 1")


@pytest.fixture(scope="module")
def xception_ns():
    assert S003_DATA.count(SMALL_BATCH[0]) == 1 and S003_OPT.count(ONE_ITER[0]) == 1
    np.random.seed(0)
    ns = run(S003_IMPORTS, S003_BLOCK, S003_XCEPTION, S003_CREATE, FILL_DEV,
             S003_DATA.replace(*SMALL_BATCH), S003_OPT.replace(*ONE_ITER))
    return ns


def test_seed003_xception_eager_training_step(xception_ns):
    ns = xception_ns
    model = ns["model"]
    t0 = time.perf_counter()
    run(S003_TRAINING_FLAG, ns=ns)
    run(S003_TRAIN, ns=ns)
    elapsed = time.perf_counter() - t0
    print(f"\nXception 299x299, batch 1, 1 eager SGD step: {elapsed:.1f} s")
    assert ns["x"].shape == (1, 1000)
    assert np.isfinite(ns["loss"].data.item())
    params = model.get_params()
    n = sum(int(np.prod(p.shape)) for p in params.values())
    assert 20_000_000 < n < 25_000_000, n  # Xception has ~22.9M parameters
    assert model.conv1.W.shape == (32, 3, 3, 3) and model.fc.W.shape == (2048, 1000)


def test_seed003_xception_compiles_in_graph_mode(xception_ns):
    """The same model, traced on Placeholders into one training graph and compiled."""
    from singa_graph import opt, zoo
    from singa_graph.ir import dtypes
    from singa_graph.ir.tensor import Placeholder
    from singa_graph.passes.verify import verify

    net = xception_ns["model"]

    m = zoo.Classifier(net)
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9, weight_decay=1e-5))
    t0 = time.perf_counter()
    m.construct_graph(Placeholder((1, 3, 299, 299), dtypes.float32),
                      Placeholder((1,), dtypes.int32))
    elapsed = time.perf_counter() - t0
    (plan,) = m.plans
    verify(plan)
    r = plan.memory_report()
    print(f"\nXception training graph: {len(plan.nodes)} nodes, compiled in {elapsed:.1f} s, "
          f"arena {r['arena_bytes'] / 2**20:.0f} MiB (lower bound "
          f"{r['lower_bound_bytes'] / 2**20:.0f}, no reuse {r['no_reuse_bytes'] / 2**20:.0f})")
    n_params = len(m.get_params())
    assert sum("update" in n.type.lower() for n in plan.nodes) == n_params
    assert r["arena_bytes"] < r["no_reuse_bytes"]


def test_seed003_xception_graph_step_matches_eager_loss(xception_ns):
    """One compiled training step gives the eager loss at the same parameters and data."""
    from singa_graph import autograd, opt, zoo
    from singa_graph.ir.op import no_grad

    ns = xception_ns
    net, tx, ty = ns["model"], ns["tx"], ns["ty"]
    autograd.training = True
    with no_grad():
        ref = autograd.softmax_cross_entropy(net(tx), ty).data.item()

    m = zoo.Classifier(net)
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9, weight_decay=1e-5))
    m.compile([tx], is_train=True, use_graph=True)
    w = net.fc.W.data.copy()
    t0 = time.perf_counter()
    out, loss = m(tx, ty)
    print(f"\nXception graph-mode training step (compile + run): "
          f"{time.perf_counter() - t0:.1f} s")
    assert abs(loss.data.item() - ref) <= 1e-4 * max(1.0, abs(ref)), (loss.data.item(), ref)
    assert not np.array_equal(net.fc.W.data, w), "the plan updated the parameters in place"
