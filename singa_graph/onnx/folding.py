"""numpy folds of ONNX nodes whose inputs are all known while importing, for the ops where
ONNX's reference implementation (the default fold, see :meth:`.program.Program._fold`)
gives wrong results or fails.

Each entry is ``fn(inputs, attrs) -> list of outputs``; ``inputs`` are numpy arrays in the
node's input order (None for an omitted optional input), ``attrs`` the node's attributes.
"""
from __future__ import annotations

import numpy as np


def _gather_elements(inputs, attrs):
    # onnx.reference's GatherElements uses np.choose, which takes at most 32 choices along
    # the axis and falls back to a wrong 2-d loop beyond (BERT's token-type buffer of 512)
    data, idx = inputs
    axis = int(attrs.get("axis", 0))
    axis = axis + data.ndim if axis < 0 else axis
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [np.take_along_axis(data, idx.astype(np.int64), axis)]


FOLDERS = {
    "GatherElements": _gather_elements,
}
