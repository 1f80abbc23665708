"""CUDA form of the fused convolution epilogue (:mod:`..cpu.epilogue`): a residual add and
an activation over a finished output, one launch after the convolution's own (which adds
the bias). The activations are the device-compiled :mod:`singa_graph.ops.formulas`; each
step's result is stored before the next reads it, as the unfused ops' buffers hold it."""
from numba import cuda

from ....ops import formulas as f
from ..cpu.epilogue import HARDSWISH, RELU, RELU6, SILU

_relu = cuda.jit(device=True)(f.relu)
_relu6 = cuda.jit(device=True)(f.relu6)
_hardsigmoid = cuda.jit(device=True)(f.hardsigmoid)
_sigmoid = cuda.jit(device=True)(f.sigmoid)


@cuda.jit(cache=True)
def epilogue_kernel(y, res, has_res, act, alpha, beta):
    """``y = act(y + res)`` elementwise over flat ``y`` (``res`` read when ``has_res``)."""
    for i in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):
        if has_res:
            y[i] = y[i] + res[i]
        v = y[i]
        if act == RELU:
            y[i] = _relu(v)
        elif act == RELU6:
            y[i] = _relu6(v)
        elif act == HARDSWISH:
            y[i] = _hardsigmoid(v, alpha, beta)
            y[i] = v * y[i]
        elif act == SILU:
            y[i] = _sigmoid(v)
            y[i] = v * y[i]
