"""The CPU that Numba compiles for: the width and number of its vector registers.

The CPU kernels hold running sums in vector registers (runtime/kernels/cpu/simd.py) and
inference plans lay weights out in blocks of one vector of output channels
(``Conv2dDirect``, ``MatMulDirect``), so both follow the machine: 64-byte vectors and 32
registers with AVX-512, 32 bytes and 16 registers with AVX2 (AMD Zen, most Intel client
chips), 16 and 16 otherwise. Tiles sized for AVX-512 run on AVX2, where LLVM splits every
vector in two, but their sums no longer fit in the registers: on a 2-core AMD EPYC (Zen 3)
squeezenet1_1's 3x3 convs took 2.6x onnxruntime's time with them.

The answer is read once a process from Numba's own view of the target (``NUMBA_CPU_NAME``
/ ``NUMBA_CPU_FEATURES`` / ``NUMBA_ENABLE_AVX`` change it as they change Numba's code) and
may be set with ``SINGA_GRAPH_VECTOR_BYTES`` (16, 32 or 64): the kernels are correct at
any width, which the tests use to run one machine's layouts on another.
"""
from __future__ import annotations

import functools
import os

import numpy as np

#: the widths the kernels are written for
VECTOR_WIDTHS = (16, 32, 64)


@functools.lru_cache(maxsize=None)
def _features() -> frozenset:
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features

    if config.CPU_FEATURES is not None:
        flat = config.CPU_FEATURES
    elif config.CPU_NAME not in (None, "host"):
        flat = ""  # a named generic target: assume no more than its baseline
    else:
        flat = get_host_cpu_features()
    return frozenset(f[1:] for f in flat.split(",") if f.startswith("+"))


def prefer_whole_vectors() -> None:
    """On an AVX-512 host, let LLVM vectorise Numba's loops with whole 64-byte registers.

    LLVM tunes Intel's AVX-512 cores to prefer 256-bit vectors in the loops that it
    vectorises itself ("prefer-256-bit", against the clock drop of heavy 512-bit code on
    the first Skylake servers). The kernels' register tiles (simd.py) take whole registers
    anyway, so a plan pays for them already, while its elementwise loops ran at half width:
    the SiLU and GELU of conv epilogues and fused chains, an exp or erf an element. One
    thread, 65536 float32 (Intel Xeon, 2026-12-02): exp 37 -> 23 us. Whole models, two
    processes taking turns in bursts after a 0.1 s pause (medians of paired bursts,
    new/old): efficientnet_b0 0.91-0.94, mnasnet0_5 0.90-0.92, resnet18 0.94-1.00,
    convnext_tiny 0.98, squeezenet1_1 0.96, mobilenet_v2 1.00, shufflenet_v2_x0_5 1.02-1.06,
    mobilenet_v3_small 0.94-1.03 (the last two within this host's noise).

    It must run before Numba compiles anything, so importing singa_graph does it: Numba's
    ``config.CPU_FEATURES`` becomes the host's features and ``-prefer-256-bit`` (what
    ``NUMBA_CPU_FEATURES`` would set). Not the environment variable itself: Numba reloads
    its whole configuration from the environment when a ``NUMBA_`` variable changes,
    which would undo settings made in ``numba.config`` by hand (a child process that
    imports singa_graph sets the same again). A ``NUMBA_CPU_FEATURES`` or
    ``NUMBA_CPU_NAME`` of the user's own, or ``SINGA_GRAPH_VECTOR_BYTES`` below 64, leaves
    Numba's choice (an empty ``SINGA_GRAPH_VECTOR_BYTES`` is unset, as for
    :func:`vector_bytes`)."""
    width = os.environ.get("SINGA_GRAPH_VECTOR_BYTES")
    if (os.environ.get("NUMBA_CPU_FEATURES") or os.environ.get("NUMBA_CPU_NAME")
            or (width and width != "64")):
        return
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features

    if config.CPU_FEATURES is not None or config.CPU_NAME not in (None, "host"):
        return
    flat = get_host_cpu_features()
    if "+avx512f" in flat.split(","):
        config.CPU_FEATURES = flat + ",-prefer-256-bit"


@functools.lru_cache(maxsize=None)
def vector_bytes() -> int:
    """Bytes of one vector register of the target: 64 (AVX-512), 32 (AVX2 with FMA) or
    16; ``SINGA_GRAPH_VECTOR_BYTES`` overrides it."""
    env = os.environ.get("SINGA_GRAPH_VECTOR_BYTES")
    if env:
        if not env.isdigit() or int(env) not in VECTOR_WIDTHS:
            raise ValueError(f"SINGA_GRAPH_VECTOR_BYTES must be one of {VECTOR_WIDTHS}, "
                             f"not {env!r}")
        return int(env)
    f = _features()
    if "avx512f" in f:
        return 64
    return 32 if {"avx2", "fma"} <= f else 16


@functools.lru_cache(maxsize=None)
def vector_registers() -> int:
    """Vector registers the target has: 32 with AVX-512, else 16."""
    return 32 if "avx512f" in _features() else 16


@functools.lru_cache(maxsize=None)
def fused_multiply_add() -> bool:
    """Whether the target has vector fused multiply-add instructions (FMA3: AVX2-era x86,
    and every AVX-512 one). Without them LLVM's ``llvm.fma`` is a call to libm's ``fmaf``
    per element, which no loop vectorises, so the kernels multiply and add instead."""
    return "fma" in _features() or "avx512f" in _features()


#: bytes of a cache line: where a vector load or store that starts off one spans two
CACHE_LINE = 64


def aligned_empty(shape, dtype, align: int = CACHE_LINE) -> np.ndarray:
    """An uninitialised C-ordered array whose data starts on an ``align``-byte boundary.

    numpy aligns to 16 bytes (large arrays come from mmap 16 bytes past a page), so every
    64-byte vector of a blocked weight or an activation row then straddles two cache lines,
    and a load of it takes two of the core's load slots. The CPU device's arrays (inputs,
    outputs, parameters it creates) and the weights the inference passes derive start on
    a line, as the arena's buffers always did. (On the 2-core Intel Xeon the conv tiles are
    not load-bound, and 3x3 convs measured the same either way.)"""
    dt = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes].view(dt).reshape(shape)


def aligned_copy(a) -> np.ndarray:
    """A copy of ``a`` in an :func:`aligned_empty` array."""
    a = np.asarray(a)
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out
