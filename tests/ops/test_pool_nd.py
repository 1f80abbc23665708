"""N-d pooling with dilations (max, average, Lp) against PyTorch."""
import numpy as np
import pytest

from singa_graph import ops

from helpers import eager

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("ceil", [False, True])
def test_dilated_3d_max_pool_matches_pytorch(ceil):
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 6, 8)).astype(np.float32)
    ref = F.max_pool3d(torch.from_numpy(x), 3, stride=2, padding=1, dilation=2,
                       ceil_mode=ceil).numpy()
    got = eager(lambda t: ops.pool_nd(t, "max", [3] * 3, [2] * 3, [2] * 3, [1] * 6, ceil), x)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("include", [False, True])
def test_3d_average_pool_matches_pytorch(include):
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 6, 7))
    ref = F.avg_pool3d(torch.from_numpy(x), (2, 3, 3), stride=(1, 2, 2), padding=1,
                       count_include_pad=include).numpy()
    got = eager(lambda t: ops.pool_nd(t, "avg", (2, 3, 3), (1, 2, 2), None, [1] * 6, False,
                                      include), x)
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_lp_pool_and_integer_max_pool():
    x = np.random.default_rng(2).standard_normal((1, 2, 6, 6))
    ref = F.lp_pool2d(torch.from_numpy(x), 3.0, 2, stride=2).numpy()
    got = eager(lambda t: ops.pool_nd(t, "lp", (2, 2), (2, 2), p=3), x)
    # PyTorch's lp_pool sums x**p without abs, so compare where every window is positive
    np.testing.assert_allclose(eager(lambda t: ops.pool_nd(t, "lp", (2, 2), (2, 2), p=3),
                                     np.abs(x)),
                               F.lp_pool2d(torch.from_numpy(np.abs(x)), 3.0, 2, 2).numpy(),
                               rtol=1e-12)
    assert got.shape == ref.shape
    xi = np.random.default_rng(3).integers(0, 255, (1, 1, 5, 5), dtype=np.uint8)
    yi = eager(lambda t: ops.pool_nd(t, "max", (2, 2), (1, 1)), xi)
    ref_i = F.max_pool2d(torch.from_numpy(xi.astype(np.float32)), 2, 1).numpy()
    np.testing.assert_array_equal(yi, ref_i.astype(np.uint8))


def test_col2im_matches_pytorch_fold():
    x = np.random.default_rng(4).standard_normal((2, 3 * 2 * 3, 12))[:, :, :9].copy()
    ref = F.fold(torch.from_numpy(x), (5, 7), (2, 3), dilation=(1, 2), padding=(1, 0),
                 stride=(2, 1)).numpy()
    got = eager(lambda t: ops.Col2Im((5, 7), (2, 3), (2, 1), (1, 2), (1, 0, 1, 0))(t), x)
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_max_pool_indices_match_pytorch():
    x = np.random.default_rng(5).standard_normal((2, 3, 7, 6)).astype(np.float32)
    ref, ref_i = F.max_pool2d(torch.from_numpy(x), 3, 2, 1, dilation=1, return_indices=True)
    y, i = eager(lambda t: ops.pool_nd(t, "max", (3, 3), (2, 2), None, [1] * 4,
                                       indices=True), x)
    np.testing.assert_array_equal(y, ref.numpy())
    plane = 7 * 6  # PyTorch counts within each plane; ONNX across the whole tensor
    base = (np.arange(6) * plane).reshape(2, 3, 1, 1)
    np.testing.assert_array_equal(i, ref_i.numpy() + base)

