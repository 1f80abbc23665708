"""Train ``zoo.CNN`` (conv-bn-relu, pooling, two parallel convs joined by cat, linear) on
scikit-learn's digits padded to 28x28 (or MNIST with ``--mnist PATH``).

    python examples/cnn.py --graph --epochs 10      # what `make demo` runs
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402

from singa_graph import zoo  # noqa: E402


def main(argv=None) -> float:
    p = _common.parser(__doc__.splitlines()[0], epochs=10, batch_size=32, lr=0.005,
                       momentum=0.9)
    args = p.parse_args(argv)
    dataset = _common.load_data(args, image_size=28)
    return _common.train(zoo.CNN(), args, dataset, name="CNN")


if __name__ == "__main__":
    main()
