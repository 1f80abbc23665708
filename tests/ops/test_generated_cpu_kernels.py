"""Generated CPU kernels (runtime/kernels/generate.py): in-place steps read the output
array itself, and float32 erf is the vectorised one, against plain numpy and math.erf."""
import math

import numpy as np
import pytest

from singa_graph.runtime.kernels import generate
from singa_graph.runtime.kernels.cpu import vecmath

# torch's GELU as it exports at opset 17: x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5
GELU_CHAIN = (("div", (0, 1)), ("erf", (-1,)), ("add", (-2, 2)), ("mul", (0, -3)),
              ("mul", (-4, 3)))


def _run(x, out, dtype):
    consts = [np.array(v, dtype) for v in (math.sqrt(2.0), 1.0, 0.5)]
    step = generate.cpu_step(GELU_CHAIN, [(0.0, 0.0)] * len(GELU_CHAIN), [x, *consts], out)
    step()
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_in_place_step_matches_the_out_of_place_one_bit_for_bit(dtype):
    x = np.random.default_rng(0).standard_normal((3, 5, 7, 33)).astype(dtype)
    want = _run(x, np.empty_like(x), dtype)
    inplace = x.copy()
    got = _run(inplace, inplace, dtype)  # the output is the input's buffer, as plans do
    np.testing.assert_array_equal(got, want)
    x64 = x.astype(np.float64)
    ref = 0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2.0)))
    if dtype == np.float64:
        np.testing.assert_allclose(got, ref, rtol=1e-14, atol=1e-15)
    else:  # float32 erf within 4.2e-7 of the exact value, times x/2, plus rounding
        bound = 0.5 * np.abs(x64) * 4.3e-7 + 4 * np.spacing(np.abs(ref).astype(np.float32))
        assert (np.abs(got - ref) <= bound).all()


def test_the_in_place_source_reads_the_output_and_erf_is_vectorised():
    src = generate._cpu_source(GELU_CHAIN, "ysss", 1)
    assert "v0 = y[i0]" in src and "x0[" not in src.split("def serial")[1]
    assert "verf(" in src and "math.erf(" not in src


def test_float32_erf_in_generated_code_is_the_vectorised_one_within_7_ulp():
    x = np.linspace(-5, 5, 20001, dtype=np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, 1e-30, -1e-6, np.inf, -np.inf, np.nan])])
    y = np.empty_like(x)
    generate.cpu_step((("erf", (0,)),), [(0.0, 0.0)], [x], y)()
    want = np.array([vecmath.erff.py_func(v) for v in x], np.float32)
    np.testing.assert_array_equal(y[:-1], want[:-1])
    assert np.isnan(y[-1])
    exact = np.array([math.erf(float(v)) for v in x[:-3]])
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert (np.abs(y[:-3] - exact) <= 7 * np.maximum(ulp, 1e-45)).all()
