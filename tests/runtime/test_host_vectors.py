"""The vector width the CPU tiles and blocked weights follow (singa_graph.host): read from
Numba's target, overridable, and correct at a width other than the machine's (LLVM splits
or widens the vectors), which a subprocess checks with its own Numba cache."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from singa_graph import host
from singa_graph.ops.conv_tiles import Conv2dDirect


def _forget():
    """Drop host's memoised answers, so the next call reads the environment again."""
    for f in (host.vector_bytes, host.vector_registers, host._features):
        f.cache_clear()


@pytest.fixture
def fresh_host(monkeypatch):
    """host's answers recomputed under the test's environment, and again after it."""
    _forget()
    yield monkeypatch
    _forget()


def test_width_follows_the_target_features(fresh_host):
    from numba.core import config

    fresh_host.delenv("SINGA_GRAPH_VECTOR_BYTES", raising=False)
    fresh_host.setattr(config, "CPU_FEATURES", "+avx,+avx2,+fma,-avx512f")
    assert (host.vector_bytes(), host.vector_registers()) == (32, 16)
    _forget()
    fresh_host.setattr(config, "CPU_FEATURES", "+avx,+avx2,+fma,+avx512f")
    assert (host.vector_bytes(), host.vector_registers()) == (64, 32)
    _forget()
    fresh_host.setattr(config, "CPU_FEATURES", "+sse4.2")
    assert host.vector_bytes() == 16


def test_the_override_is_checked(fresh_host):
    fresh_host.setenv("SINGA_GRAPH_VECTOR_BYTES", "32")
    assert host.vector_bytes() == 32
    _forget()
    fresh_host.setenv("SINGA_GRAPH_VECTOR_BYTES", "48")
    with pytest.raises(ValueError, match="16, 32, 64"):
        host.vector_bytes()


def test_blocks_are_one_vector_of_the_machine():
    assert Conv2dDirect.block(np.float32) == host.vector_bytes() // 4
    assert Conv2dDirect.block(np.float64) == host.vector_bytes() // 8


@pytest.mark.parametrize("kind", ["float32", "float64"])
def test_lanes_read_every_spelling_of_a_dtype(kind):
    # a numpy scalar type once read as "not float32": the float64 count, and tiles that
    # wrote past their rows
    import numba
    from singa_graph.runtime.kernels.cpu import simd
    want = host.vector_bytes() // np.dtype(kind).itemsize
    assert simd.lanes(np.dtype(kind)) == simd.lanes(getattr(np, kind)) == want
    assert simd.lanes(getattr(numba, kind)) == simd.lanes(kind) == want


_BUILD = """
import numpy as np
from singa_graph import host, ops
from singa_graph.ir import Graph, Placeholder
from singa_graph.ir.tensor import Tensor
from singa_graph.passes import compile, verify

rng = np.random.default_rng(0)

def c(*shape):
    a = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
    return Tensor(data=a.astype(np.float32), requires_grad=False)

def build():
    rng.bit_generator.state = np.random.default_rng(0).bit_generator.state
    x = Placeholder((2, 40, 9, 9), dtype=np.float32, name="x")
    y = ops.relu(ops.conv2d(x, c(40, 40, 3, 3), c(40), 1, 1))          # direct, a tail
    y = ops.conv2d(y, c(40, 8, 3, 3), None, 2, 1, groups=5)              # grouped, direct
    # (the three convs are one channels-last chain: Conv2dDirectNHWC, Conv2dNHWC)
    z = ops.conv2d(y, c(40, 1, 3, 3), c(40), 1, 1, groups=40)            # depthwise
    h = ops.flatten(ops.global_average_pool(ops.relu(ops.add(y, z))))
    m = Placeholder((2, 512), dtype=np.float32, name="m")
    g = ops.gemm(m, c(300, 512), c(300), trans_b=True)                   # MatMulDirect
    return Graph([h, g], inputs=[x, m])

feeds = [np.random.default_rng(1).standard_normal((2, 40, 9, 9)).astype(np.float32),
         np.random.default_rng(2).standard_normal((2, 512)).astype(np.float32)]
"""

# the optimised plan at the other width; its outputs go to the file named by argv[1]
_OTHER_WIDTH = _BUILD + """
import sys
plan = compile(build())
verify(plan)
types = sorted({n.type for n in plan.nodes})
assert "Conv2dDirectNHWC" in types and "MatMulDirect" in types, types
np.savez(sys.argv[1], *plan.run(feeds))
print(host.vector_bytes())
"""


def test_kernels_are_correct_at_another_width(tmp_path):
    """A plan of direct, grouped, depthwise convs and a MatMulDirect at the other width
    against the unoptimised plan at this one (whose kernels do not depend on the width:
    this process runs it, and the subprocess compiles only the width's own kernels). The
    subprocess's Numba cache is a folder of its own (kept between runs in
    test-artifacts/), so the machine's caches stay untouched: the kernels' digest
    includes the width, and a stamp of another width would drop them."""
    other = 64 if host.vector_bytes() != 64 else 32
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, SINGA_GRAPH_VECTOR_BYTES=str(other),
               NUMBA_CACHE_DIR=os.path.join(root, "test-artifacts", f"numba-{other}-byte"))
    outs = tmp_path / "outs.npz"
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_OTHER_WIDTH), str(outs)],
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) == other
    ns = {}
    exec(textwrap.dedent(_BUILD), ns)
    plan0 = ns["compile"](ns["build"](), fuse=False)
    assert not {"Conv2dDirect", "Conv2dDirectNHWC", "MatMulDirect"} & {n.type for n in plan0.nodes}
    with np.load(outs) as got:
        mine = [got[f"arr_{i}"] for i in range(len(got.files))]
    ref = plan0.run(ns["feeds"])
    assert len(mine) == len(ref) == 2
    err = max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(mine, ref))
    assert err < 1e-5


@pytest.mark.parametrize("shape,dtype", [((), np.float32), (0, np.float64), ((3, 5), np.int64),
                                         ((2, 7, 9), np.float32), (17, np.uint8)])
def test_device_arrays_and_derived_weights_start_on_cache_lines(shape, dtype):
    from singa_graph.runtime.device import CpuDevice

    for a in (host.aligned_empty(shape, dtype), CpuDevice(0).empty(shape, dtype),
              CpuDevice(0).zeros(shape, dtype), host.aligned_copy(np.ones(shape, dtype))):
        assert a.size == 0 or a.ctypes.data % host.CACHE_LINE == 0
        assert a.shape == (shape if isinstance(shape, tuple) else (shape,))
        assert a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    assert not CpuDevice(0).zeros(shape, dtype).any()
    assert (host.aligned_copy(np.arange(np.prod(shape), dtype=dtype).reshape(shape)) ==
            np.arange(np.prod(shape), dtype=dtype).reshape(shape)).all()


def test_folded_conv_weights_start_on_cache_lines():
    # the blocked weights of Conv2dDirect (passes/inference.Derived) are loaded a vector at a
    # time: numpy's 16-byte alignment would split every load across two lines
    from singa_graph.passes.inference import Fold
    from singa_graph.ir.tensor import Tensor

    g = np.random.default_rng(0)
    src = [Tensor(data=g.standard_normal(s).astype(np.float32)) for s in
           [(24, 5, 3, 3), (24,), (24,), (24,), (24,)]]
    var = Tensor(data=np.abs(g.standard_normal(24)).astype(np.float32) + 0.5)
    fold = Fold(src[0], src[1], src[2], src[3], src[4], var, 1e-5)
    blocked = fold.permute_first((0, 2, 3, 4, 1), block=16)
    for t in (*fold.outputs, blocked):
        assert t.data.ctypes.data % host.CACHE_LINE == 0
    fold.refresh()
    assert blocked.data.ctypes.data % host.CACHE_LINE == 0


def _features_after_import(**env):
    """Numba's ``config.CPU_FEATURES`` in a fresh process after ``import singa_graph``
    (``env`` set, ``NUMBA_CPU_FEATURES`` unset unless given), and a setting made in
    ``numba.config`` by hand before it, which must survive the next compile."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("NUMBA_CPU_FEATURES", "SINGA_GRAPH_VECTOR_BYTES")}
    code = ("from numba.core import config; config.FORCE_CUDA_CC = (9, 0)\n"
            "import singa_graph, numba, numpy\n"
            "numba.njit(lambda a: a + 1)(numpy.ones(2))\n"
            "assert config.FORCE_CUDA_CC == (9, 0)\n"
            "print(config.CPU_FEATURES or '')")
    out = subprocess.run([sys.executable, "-c", code], env=dict(clean, **env),
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def test_loops_vectorise_with_whole_avx512_registers():
    # LLVM's tuning for AVX-512 Intel cores prefers 256-bit vectors in its own loops; the
    # import turns that off where the host has AVX-512, and leaves any choice of the user's
    from numba.core.codegen import get_host_cpu_features

    avx512 = "+avx512f" in get_host_cpu_features().split(",")
    set_ = _features_after_import()
    assert set_.endswith(",-prefer-256-bit") == avx512
    assert _features_after_import(NUMBA_CPU_FEATURES="+avx2,+fma") == "+avx2,+fma"
    assert _features_after_import(SINGA_GRAPH_VECTOR_BYTES="32") == ""
    # empty is unset, as vector_bytes() reads it
    assert _features_after_import(SINGA_GRAPH_VECTOR_BYTES="").endswith(
        ",-prefer-256-bit") == avx512


def test_whole_vectors_reach_the_generated_loops():
    from numba import njit

    from singa_graph.host import vector_bytes

    @njit(error_model="numpy")
    def axpy(x):
        for i in range(x.size):
            x[i] = x[i] * np.float32(2) + np.float32(1)

    axpy(np.zeros(256, np.float32))
    asm = axpy.inspect_asm(axpy.signatures[0])
    from numba.core import config

    assert ("zmm" in asm) == (vector_bytes() == 64
                              and (config.CPU_FEATURES or "").endswith("-prefer-256-bit"))
