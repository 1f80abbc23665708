"""Ready-made models used by the examples, the benchmarks and the tests.

Each is an ordinary :class:`~singa_graph.model.Model` written with the SINGA 3 layer API,
so it doubles as an example of that API.
"""
from __future__ import annotations

from . import autograd, layer, model


class _Classifier(model.Model):
    """Shared training step: softmax cross-entropy on the logits, then the optimizer."""

    def __init__(self):
        super().__init__()
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


class Classifier(_Classifier):
    """Any layer (or callable on a tensor) as a trainable classifier Model."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)


class MLP(_Classifier):
    """``in -> hidden -> ReLU -> ... -> num_classes`` (784-256-256-10 by default)."""

    def __init__(self, hidden=(256, 256), num_classes=10):
        super().__init__()
        self.hidden = [layer.Linear(h) for h in hidden]
        self.relu = layer.ReLU()
        self.out = layer.Linear(num_classes)

    def forward(self, x):
        if len(x.shape) > 2:
            x = autograd.flatten(x)
        for lin in self.hidden:
            x = self.relu(lin(x))
        return self.out(x)


class CNN(_Classifier):
    """The CNN of the SINGA docs: conv-bn-relu, pooling, two parallel convs joined by cat,
    then a linear classifier. With ``bn=False`` and ``branches=False`` it is the plain
    'two conv+relu+maxpool blocks + linear' network."""

    def __init__(self, num_classes=10, channels=(16, 32), bn=True, branches=True):
        super().__init__()
        c1, c2 = channels
        self.conv1 = layer.Conv2d(c1, 3, padding=1)
        self.bn1 = layer.BatchNorm2d() if bn else None
        self.pool1 = layer.MaxPool2d(2, 2)
        self.branches = branches
        if branches:
            self.conv2a = layer.Conv2d(c2 // 2, 3, padding=1)
            self.conv2b = layer.Conv2d(c2 // 2, 1)
            self.cat = layer.Cat(1)
        else:
            self.conv2 = layer.Conv2d(c2, 3, padding=1)
        self.pool2 = layer.MaxPool2d(2, 2)
        self.relu = layer.ReLU()
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(num_classes)

    def forward(self, x):
        y = self.conv1(x)
        if self.bn1 is not None:
            y = self.bn1(y)
        y = self.pool1(self.relu(y))
        if self.branches:
            y = self.cat([self.conv2a(y), self.conv2b(y)])
        else:
            y = self.conv2(y)
        y = self.pool2(self.relu(y))
        return self.fc(self.flatten(y))


class BasicBlock(layer.Layer):
    """ResNet basic block: two 3x3 conv-bn, identity or 1x1-conv shortcut, ReLU."""

    def __init__(self, channels, stride=1, downsample=False):
        super().__init__()
        self.conv1 = layer.Conv2d(channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = layer.BatchNorm2d()
        self.conv2 = layer.Conv2d(channels, 3, padding=1, bias=False)
        self.bn2 = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.add = layer.Add()
        if downsample:
            self.down = layer.Conv2d(channels, 1, stride=stride, bias=False)
            self.down_bn = layer.BatchNorm2d()
        else:
            self.down = None

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        skip = self.down_bn(self.down(x)) if self.down is not None else x
        return self.relu(self.add(y, skip))


class ResNet(_Classifier):
    """ResNet-18-style network: a stem, ``len(widths)`` stages of ``blocks`` basic blocks
    (stride 2 between stages), global average pooling and a linear classifier.
    ``ResNet(widths=(64, 128, 256, 512), blocks=2)`` is ResNet-18."""

    def __init__(self, num_classes=10, widths=(16, 32), blocks=1):
        super().__init__()
        self.stem = layer.Conv2d(widths[0], 3, padding=1, bias=False)
        self.stem_bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.stages = []
        prev = widths[0]
        for i, w in enumerate(widths):
            for b in range(blocks):
                stride = 2 if (i > 0 and b == 0) else 1
                self.stages.append(BasicBlock(w, stride, downsample=(stride != 1 or prev != w)))
                prev = w
        self.pool = layer.GlobalAvgPool2d()
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(num_classes)

    def forward(self, x):
        y = self.relu(self.stem_bn(self.stem(x)))
        for blk in self.stages:
            y = blk(y)
        return self.fc(self.flatten(self.pool(y)))
