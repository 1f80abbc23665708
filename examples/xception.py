"""Xception (Chollet, https://arxiv.org/abs/1610.02357) written with SINGA 2.x's autograd
layer classes, as in SINGA's autograd docs, trained on scikit-learn's digits.

The default is the full ImageNet network (299x299x3 inputs, 8 middle blocks, 2048 features);
``--small`` keeps the architecture but uses narrow layers, 2 middle blocks and 32x32 inputs
so that it trains on a laptop CPU in a few minutes::

    python examples/xception.py --small --epochs 3
    python examples/xception.py --compile-only          # build the full network's graphs
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402

import numpy as np  # noqa: E402

from singa_graph import autograd, zoo  # noqa: E402

FULL = dict(stem=(32, 64), entry=(128, 256, 728), middle=8, exit=(1024, 1536, 2048), size=299)
SMALL = dict(stem=(8, 16), entry=(24, 32, 48), middle=2, exit=(64, 96, 128), size=32)


class Block(autograd.Layer):
    """Separable convolutions with ReLU and BatchNorm, optional max pooling, and a linear
    residual connection (a strided 1x1 convolution when the shape changes)."""

    def __init__(self, in_filters, out_filters, reps, strides=1, padding=0,
                 start_with_relu=True, grow_first=True):
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


def feature_size(image_size: int) -> int:
    """Spatial size of the features: the stride-2 stem conv, then four stride-2 blocks."""
    s = (image_size - 3) // 2 + 1
    for _ in range(4):
        s = (s - 1) // 2 + 1
    return s


class Xception(autograd.Layer):
    """Xception as specified in https://arxiv.org/pdf/1610.02357.pdf (SINGA's example), with
    the widths, the number of middle blocks and the input size as parameters."""

    def __init__(self, num_classes=1000, in_channels=3, stem=FULL["stem"],
                 entry=FULL["entry"], middle=FULL["middle"], exit=FULL["exit"],
                 image_size=FULL["size"]):
        super(Xception, self).__init__()
        self.num_classes = num_classes
        (s1, s2), (e1, e2, e3), (x1, x2, x3) = stem, entry, exit

        self.conv1 = autograd.Conv2d(in_channels, s1, 3, 2, 0, bias=False)
        self.bn1 = autograd.BatchNorm2d(s1)

        self.conv2 = autograd.Conv2d(s1, s2, 3, 1, 1, bias=False)
        self.bn2 = autograd.BatchNorm2d(s2)

        self.block1 = Block(s2, e1, 2, 2, padding=0, start_with_relu=False, grow_first=True)
        self.block2 = Block(e1, e2, 2, 2, padding=0, start_with_relu=True, grow_first=True)
        self.block3 = Block(e2, e3, 2, 2, padding=0, start_with_relu=True, grow_first=True)

        # blocks 4 to 11 of the paper: 8 identical middle-flow blocks
        self.middle = [Block(e3, e3, 3, 1, start_with_relu=True, grow_first=True)
                       for _ in range(middle)]

        self.block12 = Block(e3, x1, 2, 2, start_with_relu=True, grow_first=False)

        self.conv3 = autograd.SeparableConv2d(x1, x2, 3, 1, 1)
        self.bn3 = autograd.BatchNorm2d(x2)

        # do relu here
        self.conv4 = autograd.SeparableConv2d(x2, x3, 3, 1, 1)
        self.bn4 = autograd.BatchNorm2d(x3)

        k = feature_size(image_size)  # 10 for 299x299 inputs
        self.globalpooling = autograd.MaxPool2d(k, 1)
        self.fc = autograd.Linear(x3, num_classes)

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
        for block in self.middle:
            x = block(x)
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


class XceptionModel(zoo.Classifier):
    """The Xception layer as a trainable Model: softmax cross-entropy and the optimizer."""

    def __init__(self, **kw):
        super().__init__(Xception(**kw))


def main(argv=None) -> float | None:
    p = _common.parser(__doc__.splitlines()[0], epochs=3, batch_size=32, lr=0.02,
                       momentum=0.9)
    p.add_argument("--small", action="store_true",
                   help="narrow layers, 2 middle blocks, 32x32 inputs (trains on a CPU)")
    p.add_argument("--image-size", type=_common.int_at_least(1), default=None,
                   help="input size (default: 32 with --small, else 299)")
    p.add_argument("--middle", type=_common.int_at_least(0), default=None, help="number of middle-flow blocks")
    p.add_argument("--compile-only", action="store_true",
                   help="build the model and its training graph for one batch, no training")
    args = p.parse_args(argv)
    cfg = dict(SMALL if args.small else FULL)
    size = args.image_size or cfg.pop("size")
    cfg.pop("size", None)
    if args.middle is not None:
        cfg["middle"] = args.middle
    if feature_size(size) < 1:
        p.error(f"--image-size {size} is too small for Xception (at least 19)")
    net = XceptionModel(num_classes=10, in_channels=3, image_size=size, **cfg)
    if args.compile_only:
        from singa_graph import opt, random as sg_random

        sg_random.seed(args.seed)
        net.set_optimizer(opt.SGD(lr=args.lr, momentum=args.momentum))
        x = np.zeros((args.batch_size, 3, size, size), np.float32)
        net.compile([x], is_train=True, use_graph=True, schedule=args.schedule)
        n = sum(int(np.prod(t.shape)) for t in net.get_params().values())
        print(f"Xception for {size}x{size}x3 inputs: {len(net.get_params())} parameter "
              f"tensors, {n:,} weights")
        return None
    dataset = _common.load_data(args, image_size=size, mode="nearest", channels=3)
    return _common.train(net, args, dataset, name=f"Xception{' (small)' if args.small else ''}")


if __name__ == "__main__":
    main()
