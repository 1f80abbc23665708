"""Kernel cases: matrix products (cuBLAS or the tiled fallback) and data movement
(runtime/kernels/cuda/linalg.py, shape.py)."""
import numpy as np

from singa_graph.ops import linalg, shape

from harness import Case, rand

CASES = [
    Case(linalg.MatMul(), [rand(5, 7), rand(7, 3, seed=1)], rtol=1e-5, atol=1e-5),
    Case(linalg.MatMul(True, False), [rand(7, 5), rand(7, 3, seed=1)], rtol=1e-5, atol=1e-5,
         name="MatMul trans_a"),
    Case(linalg.MatMul(False, True), [rand(5, 7), rand(3, 7, seed=1)], rtol=1e-5, atol=1e-5,
         name="MatMul trans_b"),
    Case(linalg.MatMul(True, True), [rand(7, 5), rand(3, 7, seed=1)], rtol=1e-5, atol=1e-5,
         name="MatMul both transposed"),
    Case(linalg.MatMul(), [rand(2, 3, 5, 7), rand(2, 3, 7, 4, seed=1)], rtol=1e-5,
         atol=1e-5, name="MatMul batched"),
    Case(linalg.MatMul(), [rand(2, 5, 7), rand(7, 4, seed=1)], rtol=1e-5, atol=1e-5,
         name="MatMul batch against one matrix"),
    Case(linalg.MatMul(), [rand(5, 7).astype(np.float64), rand(7, 3, seed=1).astype(
        np.float64)], rtol=1e-12, atol=1e-12, name="MatMul float64"),
    Case(linalg.MatMul(), [rand(17, 19), rand(19, 18, seed=1)], rtol=1e-5, atol=1e-5,
         name="MatMul over several tiles"),
    # an empty inner dimension: no GEMM runs, the output is scaled by beta (zeros)
    Case(linalg.MatMul(), [rand(4, 0), rand(0, 3, seed=1)], name="MatMul empty inner"),
    Case(linalg.AddBias(1), [rand(2, 3, 4, 4), rand(3, seed=2)]),
    Case(linalg.AddBias(1), [rand(6, 3), rand(3, seed=2)], name="AddBias 2-d"),
    Case(linalg.Gemm(), [rand(4, 6), rand(6, 3, seed=1), rand(3, seed=2)], rtol=1e-5,
         atol=1e-5),
    Case(linalg.Gemm(0.5, 2.0, True, True), [rand(6, 4), rand(3, 6, seed=1),
                                              rand(4, 3, seed=2)], rtol=1e-5, atol=1e-5,
         name="Gemm alpha beta transposed"),
    Case(linalg.Gemm(), [rand(4, 6), rand(6, 3, seed=1)], rtol=1e-5, atol=1e-5,
         name="Gemm without C"),
    Case(shape.Reshape((4, 6)), [rand(2, 3, 4)]),
    Case(shape.Flatten(1), [rand(2, 3, 4)]),
    Case(shape.Identity(), [rand(2, 3)]),
    Case(shape.Transpose((2, 0, 1)), [rand(2, 3, 4)]),
    Case(shape.Transpose(), [rand(2, 3, 4)], name="Transpose reversed"),
    Case(shape.Concat(1), [rand(2, 3, 4), rand(2, 1, 4, seed=1), rand(2, 2, 4, seed=2)]),
    Case(shape.Concat(-1), [rand(2, 3), rand(2, 5, seed=1)], name="Concat last axis"),
    Case(shape.Split(1, (1, 2, 1)), [rand(2, 4, 3)]),
    Case(shape.Split(0, (2, 1)), [rand(3, 4)], name="Split first axis"),
]
