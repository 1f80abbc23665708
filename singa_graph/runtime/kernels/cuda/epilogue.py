"""CUDA form of the fused convolution epilogue (:mod:`..cpu.epilogue`): a residual add and
an activation over a finished output, one launch after the convolution's own (which adds
the bias).

On the GPU the unfused graph runs the CUDA elementwise kernels (:mod:`.elementwise`), which
compute in the tensor's dtype with typed constants (``one``, ``zero = one - one``), so this
kernel does the same, step for step, and stores each step's result before the next reads
it, as the unfused ops' buffers hold it: ReLU as the ReLU kernel, ReLU6 as ``Max`` then
``Min``, HardSwish as ``HardSigmoid`` then ``Mul``, SiLU as ``Sigmoid`` then ``Mul``. No
float64 arithmetic in float32 kernels (tests/ptx checks that)."""
import math

from numba import cuda

from ..cpu.epilogue import HARDSWISH, RELU, RELU6, SILU


@cuda.jit(device=True)
def _act(act, v, one, six, alpha, beta, y, i):
    zero = one - one
    if act == RELU:
        y[i] = v if v > zero or v != v else zero
    elif act == RELU6:
        r = v if v >= zero or v != v else zero
        y[i] = r if r <= six or r != r else six
    elif act == HARDSWISH:
        y[i] = min(one, max(zero, alpha * v + beta))
        y[i] = v * y[i]
    elif act == SILU:
        if v >= zero:  # exp of a non-positive number only: nothing overflows
            y[i] = one / (one + math.exp(-v))
        else:
            e = math.exp(v)
            y[i] = e / (one + e)
        y[i] = v * y[i]


@cuda.jit(cache=True)
def epilogue_kernel(y, res, has_res, act, one, six, alpha, beta):
    """``y = act(y + res)`` elementwise over flat ``y`` (``res`` read when ``has_res``);
    ``one``, ``six``, ``alpha``, ``beta`` in ``y``'s dtype."""
    for i in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):
        if has_res:
            y[i] = y[i] + res[i]
        _act(act, y[i], one, six, alpha, beta, y, i)
