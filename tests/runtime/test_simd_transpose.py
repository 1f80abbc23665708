"""The channel transposes of the channels-innermost kernels (depthwise_channels_last's
planes_to_rows / rows_to_planes): 8 x 8 blocks in vector registers (simd_transpose.py) and
element loops for the rest, against numpy's transpose. Sizes with and without whole
blocks, offsets into the planes, NaN and -0.0 through the ReLU; float32, the kernels'
only dtype (ops._util.tiled)."""
import numpy as np
import pytest
from numba import njit

from singa_graph.runtime.kernels.cpu import depthwise_channels_last as last


@njit(cache=True)
def _to_rows(x, xt, first, cc, hw):
    last.planes_to_rows(x, xt, first, cc, hw)


@njit(cache=True)
def _to_planes(acc, y2, first, cc, hw, relu):
    last.rows_to_planes(acc, y2, first, cc, hw, relu)


# (planes, first, cc, hw): partial blocks on both sides, whole blocks only, hw < 8
CASES = [(20, 3, 17, 9), (16, 0, 16, 64), (40, 5, 24, 16), (9, 1, 7, 4), (30, 2, 26, 27),
         (40, 3, 35, 4), (16, 0, 16, 4)]  # 2x2 planes: blocks of 16 channels


@pytest.mark.parametrize("case", CASES)
def test_channel_transposes_match_numpy(case):
    c, first, cc, hw = case
    dtype = np.float32
    rng = np.random.default_rng(cc * hw)
    x = rng.standard_normal(c * hw).astype(dtype)
    xt = np.full(cc * hw, np.nan, dtype)
    _to_rows(x, xt, first, cc, hw)
    np.testing.assert_array_equal(xt.reshape(hw, cc), x.reshape(c, hw)[first:first + cc].T)

    acc = rng.standard_normal(cc * hw).astype(dtype)
    acc[::7], acc[::5] = np.nan, -0.0
    for relu in (False, True):
        y2 = np.full((c, hw), 7, dtype)
        _to_planes(acc, y2, first, cc, hw, relu)
        want = acc.reshape(hw, cc).T
        if relu:
            want = np.where((want >= 0) | np.isnan(want), want, 0)
        np.testing.assert_array_equal(y2[first:first + cc], want)
        assert (np.signbit(y2[first:first + cc]) == np.signbit(want)).all()
        assert (y2[:first] == 7).all() and (y2[first + cc:] == 7).all()  # nothing else


def test_a_strided_destination_takes_the_element_loops():
    c, first, cc, hw = 20, 3, 16, 16
    acc = np.arange(cc * hw, dtype=np.float32)
    y2 = np.full((c, 2 * hw), 7, np.float32)[:, ::2]  # every other column
    _to_planes(acc, y2, first, cc, hw, False)
    np.testing.assert_array_equal(y2[first:first + cc], acc.reshape(hw, cc).T)
