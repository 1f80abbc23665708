"""Kernel cases: convolutions (im2col + GEMM, depthwise direct kernels) and pooling
(runtime/kernels/cuda/conv.py, depthwise.py, pool.py).

Every conv geometry runs as Conv2d, Conv2dGradInput and Conv2dGradWeight. Shapes are tiny
(batch 2, a few channels, 5x5 to 7x7): the simulator runs a Python thread per GPU thread.
Chunks of fewer samples than the batch are covered by test_conv_chunks.py.
"""
import numpy as np

from singa_graph.ops import conv, pool

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


# Fused epilogues (passes/inference.py): residual add, then ReLU6 / HardSwish / SiLU / ReLU,
# on the GEMM, pointwise and depthwise paths. (name, N, C, O, groups, k, pad, act, residual)
FUSED = [("3x3 bias residual relu", 1, 2, 3, 1, 3, 1, "relu", True),
         ("3x3 bias relu6", 2, 2, 3, 1, 3, 1, "relu6", False),
         ("1x1 bias residual hardswish", 2, 3, 2, 1, 1, 0, "hardswish", True),
         ("depthwise bias residual silu", 2, 2, 2, 2, 3, 1, "silu", True),
         ("1x1 bias sigmoid", 2, 3, 2, 1, 1, 0, "sigmoid", False),
         ("3x3 bias residual hardsigmoid", 1, 2, 3, 1, 3, 1, "hardsigmoid", True)]


def fused_case(name, n, c, o, groups, k, pad, act, residual, seed=0):
    x = rand(n, c, 5, 5, seed=seed, low=-4, high=4)
    wt = rand(o, c // groups, k, k, seed=seed + 1)
    op = conv.Conv2d(1, pad, 1, groups, act=act, residual=residual)
    ins = [x, wt, rand(o, seed=seed + 2)]
    if residual:
        ins.append(rand(*op.output_shape(x.shape, wt.shape), seed=seed + 3, low=-3, high=3))
    return Case(op, ins, 1e-5, 1e-5, name=f"Conv2d fused {name}")


CASES += [fused_case(*f, seed=500 + 10 * i) for i, f in enumerate(FUSED)]


# ---------------------------------------------------------------------- pooling
def _ties(n, c, h, w, dtype=np.float32):
    """Few distinct values: windows with several equal maxima (the tie rule matters)."""
    rng = np.random.default_rng(h * w + c)
    return rng.integers(-2, 3, (n, c, h, w)).astype(dtype)


# (name, kernel, stride, padding, H, W, ceil_mode)
WINDOWS = [
    ("2x2", 2, None, 0, 6, 6, False),
    ("2x2 odd size", 2, 2, 0, 7, 5, False),
    ("3x3 stride 2 pad 1", 3, 2, 1, 7, 7, False),
    ("3x3 stride 1 pad 1 (overlapping)", 3, 1, 1, 5, 6, False),
    ("3x2 stride (1, 2) asymmetric pads", (3, 2), (1, 2), (1, 0, 0, 1), 6, 7, False),
    ("1x1 stride 2", 1, 2, 0, 5, 5, False),
    ("2x2 stride 1 pads (0, 0, 1, 1), darknet's", 2, 1, (0, 0, 1, 1), 5, 6, False),
    # ceil mode: partial last windows, clipped to the input (and, for count_include_pad,
    # to the trailing padding: 6 rows and 8 columns at stride 2 pad 1 hang one past it)
    ("3x3 stride 2 ceil", 3, 2, 0, 8, 7, True),
    ("2x2 odd size ceil", 2, 2, 0, 7, 5, True),
    ("3x3 stride 2 pad 1 ceil", 3, 2, 1, 6, 8, True),
    ("3x2 stride (3, 2) asymmetric pads ceil", (3, 2), (3, 2), (1, 0, 0, 1), 7, 6, True),
]

for _i, (_name, _k, _s, _p, _h, _w, _c) in enumerate(WINDOWS):
    _x = rand(2, 3, _h, _w, seed=100 + _i)
    _t = _ties(2, 3, _h, _w)
    _mx = pool.MaxPool2d(_k, _s, _p, ceil_mode=_c)
    _shape = _mx.output_shape(_x.shape)
    _dy = rand(*_shape, seed=200 + _i)
    CASES += [
        Case(_mx, [_x], name=f"MaxPool2d {_name}"),
        Case(_mx, [_t], name=f"MaxPool2d {_name} ties"),
        Case(pool.MaxPool2dGrad(_k, _s, _p, ceil_mode=_c), [_dy, _x],
             name=f"MaxPool2dGrad {_name}"),
        Case(pool.MaxPool2dGrad(_k, _s, _p, ceil_mode=_c), [_dy, _t],
             name=f"MaxPool2dGrad {_name} ties"),
        # a ReLU's backward folded in (passes/fuse.py): x is the ReLU's output
        Case(pool.MaxPool2dGrad(_k, _s, _p, relu=True, ceil_mode=_c), [_dy, np.maximum(_x, 0)],
             name=f"MaxPool2dGrad {_name} relu"),
    ]
    for _inc in (False, True):
        _tag = " count_include_pad" if _inc else ""
        CASES += [
            Case(pool.AvgPool2d(_k, _s, _p, _inc, ceil_mode=_c), [_x],
                 name=f"AvgPool2d {_name}{_tag}"),
            Case(pool.AvgPool2dGrad(_k, _s, _p, _inc, x_shape=_x.shape, ceil_mode=_c), [_dy],
                 name=f"AvgPool2dGrad {_name}{_tag}"),
        ]

_X64 = rand(2, 2, 7, 6, seed=300, dtype=F64)
_DY64 = rand(2, 2, 4, 3, seed=301, dtype=F64)
_NAN = rand(2, 2, 4, 4, seed=302)
_NAN[0, 0, 0, 0] = np.nan  # first cell of a window: the max is NaN and takes the gradient
_NAN[0, 1, 1, 1] = np.nan  # last cell of a window: skipped, as the CPU's v > m does
CASES += [
    Case(pool.MaxPool2d(3, 2, 1), [_X64], 1e-12, 1e-12, name="MaxPool2d float64"),
    Case(pool.MaxPool2dGrad(3, 2, 1), [_DY64, _X64], 1e-12, 1e-12,
         name="MaxPool2dGrad float64"),
    Case(pool.AvgPool2d(3, 2, 1), [_X64], 1e-12, 1e-12, name="AvgPool2d float64"),
    Case(pool.AvgPool2dGrad(3, 2, 1, x_shape=_X64.shape), [_DY64], 1e-12, 1e-12,
         name="AvgPool2dGrad float64"),
    Case(pool.MaxPool2d(2), [_NAN], name="MaxPool2d NaN"),
    Case(pool.MaxPool2dGrad(2), [rand(2, 2, 2, 2, seed=303), _NAN], name="MaxPool2dGrad NaN"),
    Case(pool.GlobalAveragePool(), [rand(2, 3, 5, 5, seed=304)],
         name="GlobalAveragePool small planes (a thread per plane)"),
    Case(pool.GlobalAveragePool(), [rand(2, 3, 7, 6, seed=305)],
         name="GlobalAveragePool large planes (a block tree per plane)"),
    Case(pool.GlobalAveragePool(), [rand(1, 2, 17, 16, seed=308)],
         name="GlobalAveragePool planes over a real GPU's block"),
    Case(pool.GlobalAveragePool(), [rand(2, 2, 1, 1, seed=306)], name="GlobalAveragePool 1x1"),
    Case(pool.GlobalAveragePool(), [rand(2, 3, 6, 7, seed=307, dtype=F64)], 1e-12, 1e-12,
         name="GlobalAveragePool float64"),
]
