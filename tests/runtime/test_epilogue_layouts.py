"""The conv epilogue runs a contiguous block as one long row and any other block row by row
(epilogue._joined); both must give the same bits, and the same as numpy step by step."""
from types import SimpleNamespace

import numpy as np
import pytest

from singa_graph.runtime.kernels.cpu import epilogue as E


def _reference(y, bias, res, act):
    # every step rounded to float32, as the unfused ops' buffers hold it
    t = (y + bias).astype(np.float32)
    if res is not None:
        t = (t + res).astype(np.float32)
    if act == E.RELU:
        return np.where((t > 0) | np.isnan(t), t, np.float32(0))
    if act == E.RELU6:
        return np.minimum(np.maximum(t, np.float32(0)), np.float32(6))
    return t


@pytest.mark.parametrize("act", [E.NONE, E.RELU, E.RELU6, E.HARDSWISH, E.SILU, E.SIGMOID,
                                 E.HARDSIGMOID])
@pytest.mark.parametrize("has_res", [False, True])
def test_contiguous_and_strided_blocks_agree(act, has_res):
    rng = np.random.default_rng(act)
    whole = rng.standard_normal((37, 48)).astype(np.float32) * 4
    whole[0, :4] = [-0.0, np.nan, 0.0, -np.inf]
    res = rng.standard_normal((37, 24)).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    alpha, beta, k = E.act_args(SimpleNamespace(act_args=(1 / 6, 0.5)), np.dtype(np.float32))
    strided = whole.copy()[:, :24]  # rows 48 apart: kept as rows
    block = np.ascontiguousarray(whole[:, :24])  # joined into one row
    for y in (strided, block):
        E.rows_epilogue(y, bias, True, res, has_res, act, alpha, beta, k)
    assert np.array_equal(block.view(np.int32), strided.view(np.int32))
    if act in (E.NONE, E.RELU, E.RELU6):
        want = _reference(whole[:, :24], bias, res if has_res else None, act)
        assert np.array_equal(block.view(np.int32), want.view(np.int32))
