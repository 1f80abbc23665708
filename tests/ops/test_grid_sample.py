"""GridSample against PyTorch's grid_sample (2-d and 3-d, every mode and padding)."""
import numpy as np
import pytest

from singa_graph import ops

from helpers import eager

torch = pytest.importorskip("torch")
F = torch.nn.functional


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


def test_roi_align_average_equals_mean_of_bilinear_samples():
    # one bin, 2x2 samples per side at the bin's quarter points: plain bilinear reads
    x = np.arange(1 * 1 * 4 * 5, dtype=np.float64).reshape(1, 1, 4, 5)  # x = 5*row + col
    rois = np.array([[0.5, 0.5, 2.5, 2.5]])
    y = eager(lambda a, r, b: ops.RoiAlign(1, 1, 2, 1.0, "avg", True)(a, r, b), x, rois,
              np.zeros(1, np.int64))
    # half_pixel: the region is [0, 2] in pixel centres; samples at 0.5 and 1.5 per axis
    pts = [5 * r + c for r in (0.5, 1.5) for c in (0.5, 1.5)]  # bilinear of a linear map
    np.testing.assert_allclose(y.ravel(), [np.mean(pts)])
