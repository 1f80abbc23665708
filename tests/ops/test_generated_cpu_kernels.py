"""Generated CPU kernels (runtime/kernels/generate.py): in-place steps read the output
array itself, and float32 erf is the vectorised one, against plain numpy and math.erf."""
import math

import numpy as np
import pytest
from numba import njit

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


@njit
def _erff(v):  # its fused multiply-adds are LLVM intrinsics: compiled code only
    return vecmath.erff(v)


def test_float32_erf_in_generated_code_is_the_vectorised_one_within_7_ulp():
    x = np.linspace(-5, 5, 20001, dtype=np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, 1e-30, -1e-6, np.inf, -np.inf, np.nan])])
    y = np.empty_like(x)
    generate.cpu_step((("erf", (0,)),), [(0.0, 0.0)], [x], y)()
    want = np.array([_erff(v) for v in x], np.float32)
    np.testing.assert_array_equal(y[:-1], want[:-1])
    assert np.isnan(y[-1])
    exact = np.array([math.erf(float(v)) for v in x[:-3]])
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert (np.abs(y[:-3] - exact) <= 7 * np.maximum(ulp, 1e-45)).all()


# x * sigmoid(s) + 0.5: a squeeze-and-excitation gate with a scalar, as a fused chain
GATE = (("sigmoid", (1,)), ("mul", (0, -1)), ("add", (-2, 2)))


@pytest.mark.parametrize("x_shape, s_shape", [
    ((2, 6, 5, 40), (2, 1, 1, 40)),    # channels-last gate: rows of channels
    ((2, 40, 6, 5), (2, 40, 1, 1)),    # NCHW gate: one value per row
    ((3, 40, 6, 5), (40, 1, 1)),       # a per-channel parameter
    ((4, 7, 9), (4, 7, 1)),
    ((2, 6, 5, 40), (1, 6, 1, 40))])
def test_broadcast_rows_match_the_strided_loop_bit_for_bit(x_shape, s_shape, monkeypatch):
    """Broadcasts run as flat rows (_rows_step) give the values of the general strided loop,
    and numpy's within rounding; a transposed (non-contiguous) operand takes the general
    loop."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(x_shape).astype(np.float32)
    s = rng.standard_normal(s_shape).astype(np.float32)
    half = np.array(0.5, np.float32)
    values = [(0.0, 0.0)] * len(GATE)
    rows = np.empty_like(x)
    step = generate.cpu_step(GATE, values, [x, s, half], rows)
    step()
    monkeypatch.setattr(generate, "_rows_step", lambda *a: None)
    strided = np.empty_like(x)
    generate.cpu_step(GATE, values, [x, s, half], strided)()
    np.testing.assert_array_equal(rows, strided)
    ref = x.astype(np.float64) / (1 + np.exp(-s.astype(np.float64))) + 0.5
    np.testing.assert_allclose(rows, ref, rtol=1e-6, atol=1e-6)


def test_broadcast_rows_apply_only_to_contiguous_rows(monkeypatch):
    x = np.random.default_rng(2).standard_normal((2, 40, 6, 5)).astype(np.float32)
    s = np.ones((2, 40, 1, 1), np.float32)
    made = []
    real = generate._rows_step
    monkeypatch.setattr(generate, "_rows_step", lambda *a: made.append(real(*a)) or made[-1])
    for xin in (x, x.transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2)):  # inner stride 6
        out = np.empty_like(x)
        generate.cpu_step(GATE, [(0.0, 0.0)] * 3, [xin, s, np.array(0.5, np.float32)], out)()
        np.testing.assert_allclose(out, x / (1 + np.exp(-1.0)) + 0.5, rtol=1e-6, atol=1e-6)
    assert [m is None for m in made] == [False, True], made


@pytest.mark.parametrize("x_shape, s_shape", [((2, 6, 5, 40), (2, 1, 1, 40)),
                                              ((2, 40, 6, 5), (2, 40, 1, 1)),
                                              ((65, 2, 192), (192,))])
@pytest.mark.parametrize("program, order", [(GATE, "xs"), ((("sub", (0, 1)),), "sx")])
def test_broadcast_rows_in_place_match_out_of_place(x_shape, s_shape, program, order,
                                                    monkeypatch):
    """A plan runs a broadcast in place where its big operand dies (the output is that
    operand, kind ``y``): still as flat rows, with the same bits as out of place, with the
    output first or second among the operands."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    s = rng.standard_normal(s_shape).astype(np.float32)
    extra = [np.array(0.5, np.float32)] if program is GATE else []
    values = [(0.0, 0.0)] * len(program)

    def operands(big):
        return ([big, s] if order == "xs" else [s, big]) + extra

    want = np.empty_like(x)
    generate.cpu_step(program, values, operands(x), want)()
    made = []
    real = generate._rows_step
    monkeypatch.setattr(generate, "_rows_step", lambda *a: made.append(real(*a)) or made[-1])
    y = x.copy()
    generate.cpu_step(program, values, operands(y), y)()
    assert made and made[0] is not None
    np.testing.assert_array_equal(y, want)
    ref = s - x if order == "sx" else x / (1 + np.exp(-s.astype(np.float64))) + 0.5
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)
