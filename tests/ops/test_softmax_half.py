"""float16 Softmax runs its float32 kernel on staged copies and rounds once."""
import numpy as np

from singa_graph import ops

from helpers import eager


def test_float16_softmax_runs_in_float32_and_rounds_once():
    x = np.random.default_rng(7).standard_normal((3, 5)).astype(np.float16)
    ref = np.exp(x.astype(np.float32))
    ref = (ref / ref.sum(1, keepdims=True)).astype(np.float16)
    got = eager(lambda t: ops.softmax(t, 1), x)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, ref)
