"""Kernel cases: the integer elementwise ops (truncating division, Mod, BitShift, Bitwise*),
whose CUDA kernels are generated from the same formulas as the CPU loops."""
import numpy as np

from singa_graph.ops import integer as it

from harness import Case

_A = np.array([[-7, 7, -8, 9], [100, -100, 5, -1]], np.int32)
_B = np.array([2, -3, 3, -4], np.int32)
_U = np.array([[200, 7, 255, 1], [0, 128, 5, 9]], np.uint8)
_S = np.array([0, 1, 7, 9], np.uint8)
_F = np.array([-4.3, 7.2, 5.0, 4.3], np.float32)
_G = np.array([2.1, -3.4, 8.0, -2.1], np.float32)

CASES = [
    Case(it.TruncDiv(), [_A, _B], name="TruncDiv int32"),
    Case(it.Mod(), [_A, _B], name="Mod int32"),
    Case(it.Mod(True), [_A, _B], name="Mod fmod int32"),
    Case(it.Mod(), [_F, _G], name="Mod float32"),
    Case(it.Mod(True), [_F, _G], name="Mod fmod float32"),
    Case(it.BitShift("left"), [_U, _S], name="BitShift left uint8"),
    Case(it.BitShift("right"), [_A, np.array([1, 0, 40, 3], np.int32)],
         name="BitShift right int32"),
    Case(it.BitwiseAnd(), [_U, _U[::-1].copy()]),
    Case(it.BitwiseOr(), [_A, _A[::-1].copy()]),
    Case(it.BitwiseXor(), [_U, _U[::-1].copy()]),
    Case(it.BitwiseNot(), [_A]),
]
