"""GridSample and RoiAlign. GridSample (ONNX, PyTorch's ``grid_sample``): values of an
``(N, C, *spatial)`` input at the normalised coordinates of a grid ``(N, *out_spatial,
k)``, with nearest, linear or cubic interpolation and zeros, border or reflection padding,
over any number of spatial axes. RoiAlign: see its class.

Neither is differentiable here (imported inference graphs use them; GridSample's gradient
with respect to the grid is piecewise and not built).
"""
from __future__ import annotations

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float

__all__ = ["GridSample", "RoiAlign", "grid_sample"]

MODES = ("nearest", "linear", "cubic")
PADDINGS = ("zeros", "border", "reflection")


class GridSample(Operation):
    differentiable = False

    def __init__(self, mode="linear", padding_mode="zeros", align_corners=False):
        mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
        if mode not in MODES or padding_mode not in PADDINGS:
            raise ValueError(f"GridSample: mode must be one of {MODES} and padding_mode one "
                             f"of {PADDINGS}, got {mode!r}, {padding_mode!r}")
        self.mode, self.padding_mode = mode, padding_mode
        self.align_corners = bool(align_corners)

    def infer(self, x, grid):
        need_float(x, grid)
        k = x.ndim - 2
        if k < 1 or grid.ndim != k + 2 or grid.shape[-1] != k or grid.shape[0] != x.shape[0]:
            raise ShapeError(f"GridSample of {x.shape} needs a grid (N, {k} output sizes, "
                             f"{k}), got {grid.shape}")
        return [TensorSpec(x.shape[:2] + grid.shape[1:-1], x.dtype)]


def grid_sample(x, grid, mode="linear", padding_mode="zeros", align_corners=False):
    return GridSample(mode, padding_mode, align_corners)(x, grid)


class RoiAlign(Operation):
    """ONNX RoiAlign: each region of interest ``rois[r] = (x1, y1, x2, y2)`` of image
    ``batch_indices[r]`` pooled to ``(output_height, output_width)`` bins by averaging (or
    taking the largest of) bilinear samples, ``sampling_ratio`` per bin side (adaptive when
    0). Not differentiable here."""

    differentiable = False

    def __init__(self, output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0,
                 mode="avg", half_pixel=True):
        self.output_height, self.output_width = int(output_height), int(output_width)
        self.sampling_ratio, self.spatial_scale = int(sampling_ratio), float(spatial_scale)
        if mode not in ("avg", "max"):
            raise ValueError(f"RoiAlign mode must be avg or max, got {mode!r}")
        self.mode, self.half_pixel = mode, bool(half_pixel)

    def infer(self, x, rois, batch_indices):
        need_float(x, rois)
        if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or \
                batch_indices.shape != (rois.shape[0],):
            raise ShapeError(f"RoiAlign: input {x.shape} (N, C, H, W), rois {rois.shape} "
                             f"(R, 4) and batch indices {batch_indices.shape} (R,) do not fit")
        return [TensorSpec((rois.shape[0], x.shape[1], self.output_height,
                            self.output_width), x.dtype)]
