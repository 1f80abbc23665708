"""3-d convolution and transposed convolution against PyTorch."""
import numpy as np
import pytest

from singa_graph import ops

from helpers import eager

torch = pytest.importorskip("torch")
F = torch.nn.functional


def test_conv3d_with_groups_strides_dilations_matches_pytorch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 6, 7, 5))
    w = rng.standard_normal((6, 2, 3, 2, 3))
    ref = F.conv3d(torch.from_numpy(x), torch.from_numpy(w), stride=(1, 2, 1), padding=1,
                   dilation=(2, 1, 1), groups=2).numpy()
    got = eager(lambda a, b: ops.conv_nd(a, b, (1, 2, 1), (2, 1, 1), [1] * 6, 2), x, w)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


def test_conv_transpose3d_matches_pytorch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 3, 4, 2))
    w = rng.standard_normal((4, 3, 2, 3, 2))
    ref = F.conv_transpose3d(torch.from_numpy(x), torch.from_numpy(w), stride=(2, 1, 2),
                             dilation=(1, 2, 1), groups=2, output_padding=(1, 0, 1)).numpy()
    got = eager(lambda a, b: ops.conv_transpose_nd(a, b, (2, 1, 2), (1, 2, 1), 2, (1, 0, 1)),
                x, w)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
