"""CUDA form of the fused convolution epilogue (:mod:`..cpu.epilogue`): a residual add and
an activation over a finished output, one launch after the convolution's own (which adds
the bias).

The activations are the formulas of :mod:`singa_graph.ops.formulas` compiled as device
functions (:func:`..generate.compiled_formulas`), the same definitions the unfused graph's
elementwise kernels evaluate, with the formulas' constants in the tensor's dtype (no float64
arithmetic in float32 kernels; tests/ptx checks that). Each step's result is stored before the
next reads it, as the unfused ops' buffers hold it: HardSwish as HardSigmoid then Mul, SiLU
as Sigmoid then Mul; Sigmoid and HardSigmoid alone (squeeze-and-excitation gates)."""
from numba import cuda

from ..cpu.epilogue import HARDSIGMOID, HARDSWISH, RELU, RELU6, SIGMOID, SILU
from ..generate import compiled_formulas

_f = compiled_formulas(("relu", "relu6", "hardsigmoid", "sigmoid"), "cuda")
_relu, _relu6, _hardsigmoid, _sigmoid = _f.relu, _f.relu6, _f.hardsigmoid, _f.sigmoid


@cuda.jit(device=True)
def _act(act, v, alpha, beta, k, y, i):
    z = k[0]
    if act == RELU:
        y[i] = _relu(v, z, z, k)
    elif act == RELU6:
        y[i] = _relu6(v, z, z, k)
    elif act == HARDSWISH:
        y[i] = _hardsigmoid(v, alpha, beta, k)
        y[i] = v * y[i]
    elif act == SILU:
        y[i] = _sigmoid(v, z, z, k)
        y[i] = v * y[i]
    elif act == SIGMOID:
        y[i] = _sigmoid(v, z, z, k)
    elif act == HARDSIGMOID:
        y[i] = _hardsigmoid(v, alpha, beta, k)


@cuda.jit(cache=True)
def epilogue_kernel(y, res, has_res, act, alpha, beta, k):
    """``y = act(y + res)`` elementwise over flat ``y`` (``res`` read when ``has_res``);
    ``alpha``, ``beta`` and the formulas' constants ``k`` in ``y``'s dtype."""
    for i in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):
        if has_res:
            y[i] = y[i] + res[i]
        _act(act, y[i], alpha, beta, k, y, i)
