"""Train ``zoo.MLP`` (in-256-256-10 with ReLU) on flattened scikit-learn digits (or MNIST
with ``--mnist PATH``).

    python examples/mlp.py --epochs 10
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402

from singa_graph import zoo  # noqa: E402


def main(argv=None) -> float:
    p = _common.parser(__doc__.splitlines()[0], epochs=10, batch_size=32, lr=0.05,
                       momentum=0.9)
    p.add_argument("--hidden", type=_common.int_at_least(1), nargs="+", default=[256, 256],
                   help="hidden layer widths (default: %(default)s)")
    args = p.parse_args(argv)
    xtr, ytr, xte, yte = _common.load_data(args)
    dataset = (xtr.reshape(len(xtr), -1), ytr, xte.reshape(len(xte), -1), yte)
    return _common.train(zoo.MLP(hidden=tuple(args.hidden)), args, dataset, name="MLP")


if __name__ == "__main__":
    main()
