"""GridSample against PyTorch's grid_sample (2-d and 3-d, every mode and padding)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from singa_graph import ops

from helpers import eager


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_2d_matches_pytorch(mode, pad, align):
    if mode == "bicubic" and pad == "border":
        pytest.skip("ONNX clamps the sample point before taking the 4 taps; PyTorch clamps "
                    "each tap (ONNX's own node tests cover ONNX's rule)")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 6))
    grid = rng.uniform(-1.3, 1.3, (2, 4, 7, 2))
    ref = F.grid_sample(torch.from_numpy(x), torch.from_numpy(grid), mode, pad,
                        align_corners=align).numpy()
    got = eager(lambda a, g: ops.grid_sample(a, g, mode, pad, align), x, grid)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_3d_trilinear_matches_pytorch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 4, 5, 3)).astype(np.float32)
    grid = rng.uniform(-1, 1, (1, 3, 2, 4, 3)).astype(np.float32)
    ref = F.grid_sample(torch.from_numpy(x), torch.from_numpy(grid), "bilinear", "border",
                        align_corners=False).numpy()
    got = eager(lambda a, g: ops.grid_sample(a, g, "linear", "border"), x, grid)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
