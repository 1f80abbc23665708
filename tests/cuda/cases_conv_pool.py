"""Kernel cases: convolutions (im2col + GEMM, depthwise direct kernels)
(runtime/kernels/cuda/conv.py, depthwise.py).

Every conv geometry runs as Conv2d, Conv2dGradInput and Conv2dGradWeight. Shapes are tiny
(batch 2, a few channels, 5x5 to 7x7): the simulator runs a Python thread per GPU thread.
Chunks of fewer samples than the batch are covered by test_conv_chunks.py.
"""
import numpy as np

from singa_graph.ops import conv

from harness import Case, rand

F32, F64 = np.float32, np.float64

# (name, N, C, O, groups, kernel, stride, padding, dilation, H, W, bias, relu, dtype).
# The simulator's GEMM costs about 2 ms per output element, so the column GEMMs stay under
# ~400 entries (N * C*kh*kw * Ho*Wo); N = 1 runs the one-sample GEMMs, N = 2 the batched.
GEOMETRIES = [
    ("3x3", 2, 2, 3, 1, (3, 3), 1, 0, 1, 5, 5, False, False, F32),
    ("3x3 pad 1 bias", 1, 2, 3, 1, (3, 3), 1, 1, 1, 5, 5, True, False, F32),
    ("3x3 stride 2 pad 1 bias relu", 2, 2, 3, 1, (3, 3), 2, 1, 1, 5, 6, True, True, F32),
    ("relu without bias odd size", 2, 2, 2, 1, (3, 3), 2, 0, 1, 7, 5, False, True, F32),
    ("5x5 stride 3 pad 2", 1, 2, 2, 1, (5, 5), 3, 2, 1, 7, 5, True, False, F32),
    ("asymmetric pads and kernel", 2, 2, 3, 1, (3, 2), (1, 2), (1, 0, 0, 2), 1, 5, 5, False,
     False, F32),
    ("dilation 2", 2, 2, 3, 1, (3, 3), 1, 1, 2, 5, 5, True, False, F32),
    ("1x1 (GEMM on x)", 2, 3, 4, 1, (1, 1), 1, 0, 1, 5, 5, True, False, F32),
    ("1x1 relu", 2, 3, 2, 1, (1, 1), 1, 0, 1, 5, 6, False, True, F32),
    ("1x1 stride 2", 2, 3, 2, 1, (1, 1), 2, 0, 1, 7, 6, False, False, F32),
    ("1x1 pad 1", 2, 2, 2, 1, (1, 1), 1, 1, 1, 5, 4, True, False, F32),
    ("groups 2 stride 2", 2, 4, 4, 2, (3, 3), 2, 0, 1, 5, 5, False, False, F32),
    ("groups 2 strided dilated bias relu", 2, 4, 4, 2, (3, 2), (2, 1), (1, 0), (2, 1), 6, 4,
     True, True, F32),
    ("groups 2 1x1", 2, 4, 4, 2, (1, 1), 1, 0, 1, 5, 4, True, False, F32),
    ("groups 3 one sample", 1, 6, 3, 3, (2, 2), 2, 1, 1, 5, 5, False, True, F32),
    ("depthwise", 2, 2, 2, 2, (3, 3), 1, 1, 1, 5, 5, False, False, F32),
    ("depthwise stride 2 bias relu", 2, 2, 2, 2, (3, 3), 2, 1, 1, 7, 7, True, True, F32),
    ("depthwise multiplier 2 dilated", 2, 2, 4, 2, (2, 2), 1, 2, 2, 5, 6, True, False, F32),
    ("one input channel 5x3 asymmetric", 2, 1, 1, 1, (5, 3), (2, 1), (2, 1, 1, 0), 1, 7, 5,
     False, False, F32),
    ("float64", 2, 2, 3, 1, (3, 3), 2, 1, 1, 5, 6, True, True, F64),
    ("float64 groups 2", 2, 4, 4, 2, (2, 2), 2, 0, 1, 5, 5, True, False, F64),
    ("float64 1x1", 2, 3, 2, 1, (1, 1), 1, 0, 1, 5, 5, False, False, F64),
    ("float64 depthwise", 2, 2, 2, 2, (3, 3), 2, 1, 1, 7, 6, True, False, F64),
]


def _tol(dtype):
    return (1e-12, 1e-12) if dtype == F64 else (1e-5, 1e-5)


def conv_cases(name, n, c, o, groups, k, stride, padding, dilation, h, w, bias, relu, dtype,
               seed=0):
    """Conv2d, Conv2dGradInput and Conv2dGradWeight cases of one geometry."""
    rtol, atol = _tol(dtype)
    x = rand(n, c, h, w, seed=seed, dtype=dtype)
    wt = rand(o, c // groups, *k, seed=seed + 1, dtype=dtype)
    fwd = conv.Conv2d(stride, padding, dilation, groups, relu=relu)
    ins = [x, wt] + ([rand(o, seed=seed + 2, dtype=dtype)] if bias else [])
    y_shape = fwd.output_shape(x.shape, wt.shape)
    dy = rand(*y_shape, seed=seed + 3, dtype=dtype)
    attrs = (stride, padding, dilation, groups)
    return [
        Case(fwd, ins, rtol, atol, name=f"Conv2d {name}"),
        Case(conv.Conv2dGradInput(*attrs, x_shape=x.shape), [dy, wt], rtol, atol,
             name=f"Conv2dGradInput {name}"),
        Case(conv.Conv2dGradWeight(*attrs, w_shape=wt.shape), [dy, x], rtol, atol,
             name=f"Conv2dGradWeight {name}"),
    ]


CASES = [c for i, g in enumerate(GEOMETRIES) for c in conv_cases(*g, seed=10 * i)]
