"""Train a small ``zoo.ResNet`` (basic blocks, BatchNorm, stride-2 stages, global average
pooling) on scikit-learn's digits upsampled to ``--image-size`` (or MNIST with ``--mnist``).

    python examples/resnet.py --epochs 3
    python examples/resnet.py --width 64 --blocks 2 --stages 4 --image-size 32  # ResNet-18
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402

from singa_graph import zoo  # noqa: E402


def main(argv=None) -> float:
    p = _common.parser(__doc__.splitlines()[0], epochs=3, batch_size=32, lr=0.05,
                       momentum=0.9)
    p.add_argument("--width", type=_common.int_at_least(1), default=16,
                   help="channels of the first stage, doubled at each next stage (%(default)s)")
    p.add_argument("--stages", type=_common.int_at_least(1), default=2, help="number of stages (%(default)s)")
    p.add_argument("--blocks", type=_common.int_at_least(1), default=1,
                   help="basic blocks per stage (%(default)s)")
    p.add_argument("--image-size", type=_common.int_at_least(1), default=16,
                   help="digits are upsampled to this size (%(default)s)")
    args = p.parse_args(argv)
    dataset = _common.load_data(args, image_size=args.image_size, mode="nearest")
    widths = tuple(args.width * 2 ** i for i in range(args.stages))
    return _common.train(zoo.ResNet(widths=widths, blocks=args.blocks), args, dataset,
                         name=f"ResNet{widths}x{args.blocks}")


if __name__ == "__main__":
    main()
