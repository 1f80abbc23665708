"""Integer elementwise ops (truncating division, Mod, BitShift, Bitwise*) in every integer
dtype against numpy, in eager mode and in a compiled plan (the same generated kernels)."""
import numpy as np
import pytest

from singa_graph import ops
from singa_graph.errors import DTypeError
from singa_graph.ir.graph import Graph
from singa_graph.ir.tensor import Placeholder
from singa_graph.passes.compile import compile as compile_plan

from helpers import eager

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def _operands(dt, seed=0):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, (3, 4), dtype=dt, endpoint=True)
    b = rng.integers(max(info.min, -50), 50, (4,), dtype=dt, endpoint=True)
    b[b == 0] = 7
    return a, b


def _trunc(a, b):
    q = np.floor_divide(a, b)
    return q + ((np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))).astype(q.dtype)


@pytest.mark.parametrize("dt", INTS)
def test_division_and_remainders_match_numpy(dt):
    a, b = _operands(dt)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(eager(ops.trunc_div, a, b), _trunc(a, b))
        np.testing.assert_array_equal(eager(lambda x, y: ops.mod(x, y), a, b), np.mod(a, b))
        np.testing.assert_array_equal(eager(lambda x, y: ops.mod(x, y, True), a, b),
                                      np.fmod(a, b))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_float_mod_is_exact_with_numpys_signs_and_nans(dt):
    a = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0, 0.0, -0.0, -3.0, np.inf, 1.0], dt)
    b = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0, -2.0, 2.0, np.inf, 2.0, 0.0], dt)
    with np.errstate(all="ignore"):
        for fmod, ref in ((False, np.mod(a, b)), (True, np.fmod(a, b))):
            got = eager(lambda x, y: ops.mod(x, y, fmod), a, b)
            assert got.dtype == dt
            np.testing.assert_array_equal(got, ref)
            real = ~np.isnan(ref)  # a NaN's sign bit is not specified
            np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(ref[real]))


@pytest.mark.parametrize("dt", INTS)
def test_shifts_and_bitwise_ops_match_numpy(dt):
    a, _ = _operands(dt, 1)
    bits = np.iinfo(dt).bits
    s = np.array([0, 1, 3, bits - 1], dt)
    left = (a.astype(np.uint64) << s.astype(np.uint64)).astype(dt)  # wraps as C does
    np.testing.assert_array_equal(eager(lambda x, y: ops.bit_shift(x, y, "left"), a, s), left)
    np.testing.assert_array_equal(eager(lambda x, y: ops.bit_shift(x, y, "right"), a, s),
                                  a >> s)
    b = a[::-1].copy()
    for fn, ref in ((ops.bitwise_and, a & b), (ops.bitwise_or, a | b),
                    (ops.bitwise_xor, a ^ b)):
        np.testing.assert_array_equal(eager(fn, a, b), ref)
    np.testing.assert_array_equal(eager(ops.bitwise_not, a), ~a)


def test_shift_counts_outside_the_width_give_zero_or_minus_one():
    a = np.array([-5, 5, -5, 5], np.int8)
    s = np.array([8, 8, -1, 100], np.int8)
    np.testing.assert_array_equal(eager(lambda x, y: ops.bit_shift(x, y, "right"), a, s),
                                  [-1, 0, -1, 0])
    np.testing.assert_array_equal(eager(lambda x, y: ops.bit_shift(x, y, "left"), a, s),
                                  [0, 0, 0, 0])


def test_integer_ops_in_a_plan_match_eager():
    a, b = _operands(np.int16, 2)
    pa, pb = Placeholder(a.shape, np.int16), Placeholder(b.shape, np.int16)
    y = ops.bitwise_xor(ops.mod(ops.trunc_div(pa, pb), pb), pa)
    plan = compile_plan(Graph([y], inputs=[pa, pb]), fetches=[y])
    ref = np.mod(_trunc(a, b), b) ^ a
    np.testing.assert_array_equal(plan.run([a, b])[0], ref)


def test_float_operands_are_refused_by_name():
    x = np.ones(3, np.float32)
    with pytest.raises(DTypeError, match="BitwiseAnd"):
        eager(ops.bitwise_and, x, x)


def test_bit_cast_reads_the_same_bytes():
    x = np.array([1.0, -2.5, np.inf], np.float32)
    np.testing.assert_array_equal(eager(lambda t: ops.bit_cast(t, np.int32), x),
                                  x.view(np.int32))
    with pytest.raises(DTypeError, match="widths differ"):
        eager(lambda t: ops.bit_cast(t, np.int64), x)
