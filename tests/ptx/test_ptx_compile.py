"""Every CUDA kernel launch that the simulator tests make compiles for a real GPU.

numba's CUDA simulator runs kernels as Python, so it neither types nor compiles them. This
module reads the record of kernel launches that ``tests/cuda`` writes on the simulator
(:mod:`launch_record`) and compiles each recorded signature with ``cuda.compile_ptx`` for
the GPUs we run on (compute capability 9.0: H100/H200; and 8.0: A100), then assembles the
PTX for both with ptxas where the toolkit has it. It needs libNVVM but no GPU (see
:mod:`offline_nvvm`). It also checks what the record can tell beyond compiling: that every
kernel was launched at least once (else it was never compiled here either), that no
launch passes a host array, and that float32 kernels do no float64 arithmetic except
where it is deliberate (:data:`DELIBERATE_F64`).

Run it after the simulator suite, in a process without ``NUMBA_ENABLE_CUDASIM`` (the
simulator replaces numba.cuda): ``make test`` does. A missing or stale record, or no
toolkit, skips with the reason.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest

import launch_record
import offline_nvvm

if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
    pytest.skip("the CUDA simulator replaces numba.cuda: the PTX check runs in a process "
                "without NUMBA_ENABLE_CUDASIM", allow_module_level=True)
pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")

TARGETS = [(9, 0), (8, 0)]


def _record():
    body = launch_record.load()
    if body is None:
        pytest.skip("no record of CUDA kernel launches: run the simulator suite first "
                    "(NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda; make test does)")
    now = launch_record.source_digests()
    stale = sorted(m for m in set(now) | set(body["sources"])
                   if now.get(m) != body["sources"].get(m))
    if stale:
        pytest.skip("the record of CUDA kernel launches predates changes to "
                    f"{', '.join(m.rsplit('.', 1)[1] for m in stale)}: rerun the simulator "
                    "suite (NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda)")
    return body["signatures"]


def _label(entry) -> str:
    args = ", ".join(str(launch_record.numba_type(a)) for a in entry["args"])
    return f"{entry['module'].rsplit('.', 1)[1]}.{entry['kernel']}({args})"


def _compile(entry, cc):
    """(PTX, None) or (None, the error's first lines)."""
    from numba import cuda

    disp = getattr(importlib.import_module(entry["module"]), entry["kernel"])
    sig = tuple(launch_record.numba_type(a) for a in entry["args"])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ptx, _ = cuda.compile_ptx(disp.py_func, sig, cc=cc)
        return ptx, None
    except Exception as e:  # typing and lowering errors: report them all, not the first
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        return None, f"{type(e).__name__}: " + "\n    ".join(lines[:12])


@pytest.fixture(scope="module")
def toolkit():
    try:
        return offline_nvvm.toolkit()
    except offline_nvvm.Unavailable as e:
        pytest.skip(str(e))


class _Compiled(dict):
    """``{cc: [(entry, ptx, error)]}`` for every recorded signature, each target compiled
    when a test first asks for it: a pytest-xdist worker given one target's tests (make
    test runs this suite on two, grouped by target) compiles that target alone."""

    def __init__(self, sigs):
        super().__init__()
        self.sigs = sigs

    def __missing__(self, cc):
        with offline_nvvm.offline(cc):
            self[cc] = [(e, *_compile(e, cc)) for e in self.sigs]
        return self[cc]


@pytest.fixture(scope="module")
def compiled(toolkit):
    return _Compiled(_record())


def _name(cc) -> str:
    return f"sm_{cc[0]}{cc[1]}"


def _by_target(cc):
    """Parameter ``cc`` in its target's xdist group: one worker compiles each target."""
    return pytest.param(cc, id=_name(cc), marks=pytest.mark.xdist_group(name=_name(cc)))


#: the target whose PTX test_float32_kernels_compute_in_float32 reads
CHECKED = TARGETS[0]


@pytest.mark.parametrize("cc", [_by_target(cc) for cc in TARGETS])
def test_every_recorded_kernel_compiles(compiled, cc):
    bad = [f"{_label(e)}\n  first launched by {e['test']}\n    {err}"
           for e, _, err in compiled[cc] if err]
    assert not bad, (f"{len(bad)} of {len(compiled[cc])} kernel signatures do not compile "
                     f"for {_name(cc)}:\n" + "\n".join(bad))


@pytest.mark.parametrize("cc", [_by_target(cc) for cc in TARGETS])
def test_ptx_assembles(compiled, toolkit, cc):
    """ptxas turns PTX into the GPU's code when the driver loads a kernel: resource limits
    (shared memory, registers) and PTX the target lacks fail there, not in NVVM."""
    if toolkit.ptxas is None:
        pytest.skip(f"no ptxas in the toolkit of {toolkit.nvvm}: PTX not assembled")
    arch = f"-arch={_name(cc)}"

    def assemble(k, ptx):
        src = os.path.join(tmp, f"k{k}.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        return subprocess.run([toolkit.ptxas, arch, "-o", os.devnull, src],
                              capture_output=True, text=True)

    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(os.cpu_count()) as pool:
        runs = [(e, pool.submit(assemble, k, ptx))
                for k, (e, ptx, _) in enumerate(compiled[cc]) if ptx is not None]
        bad = [f"{_label(e)}\n    {r.result().stderr.strip()[:600]}"
               for e, r in runs if r.result().returncode]
    assert not bad, f"ptxas {arch} rejects the PTX of:\n" + "\n".join(bad)


# Float32 kernels that do float64 arithmetic on purpose, and why: where the CPU kernel does
# the same, or where a GPU thread's long serial sum needs it to stay within float32
# tolerance of numpy's pairwise float32 sums. Anything else is an accident.
DELIBERATE_F64 = {
    "activation._rows_f32": "softmax and log-softmax sum the exponentials in float64 and "
                            "scale by that sum, as the CPU row loops",
    "loss._sce_f32": "losses sum in float64, as the CPU kernels",
    "loss._flat_loss": "losses sum in float64, as the CPU kernels",
    "loss._sce_grad_f32": "the log-sum-exp is float64 and 1/N a float64, as on the CPU",
    "loss._flat_grad": "1/N (and 2/N) are float64 and promote the product, as on the CPU",
    "norm._forward": "BatchNorm's statistics and per-channel affine map are float64, as on "
                     "the CPU",
    "reduce._reduce_f": "Sum and Mean accumulate in float64: numpy's float32 sums are "
                        "pairwise, a GPU lane's are serial",
    "pool._gap_tree": "a mean: accumulates in float64 as Mean does",
    "pool._gap_thread": "a mean: accumulates in float64 as Mean does",
    "pool._pool_fwd": "average pooling sums in float64, as the CPU loop (not max pooling)",
    "pool._pool_bwd": "average pooling's gradient divides and sums in float64, as the CPU "
                      "loop (not max pooling)",
    "attention._ln_fwd": "LayerNorm's statistics are float64, as the CPU loop",
    "attention._ln_dx": "LayerNorm's backward sums in float64, as the CPU loop",
    "attention._ln_dparam": "LayerNorm's parameter gradients sum in float64, as the CPU loop",
    # The attention kernels are one thread per row, correctness first: their softmax sums are
    # float64 as on the CPU, and so are their dot products (the CPU's BLAS GEMMs accumulate
    # in float32). Tiled kernels in the data's dtype are the step that makes them fast.
    "attention._att_fwd": "softmax sums (as the CPU) and row dot products in float64",
    "attention._att_bwd_rows": "softmax sums (as the CPU) and row dot products in float64",
    "attention._att_bwd_cols": "row dot products in float64",
}


def _float32_kernel(entry) -> bool:
    """Launches whose arrays hold float32 and none float64 (float scalars may be float64:
    a Python float passed at launch is exactly the accident to catch)."""
    arrays, stack = set(), list(entry["args"])
    while stack:
        a = stack.pop()
        if a[0] == "tuple":
            stack.extend(a[1])
        elif a[0] in ("array", "host_array"):
            arrays.add(a[1])
    return "float32" in arrays and "float64" not in arrays


@pytest.mark.xdist_group(name=_name(CHECKED))
def test_float32_kernels_compute_in_float32(compiled):
    """``cvt.f64.f32`` in a float32 kernel's PTX is float32 data promoted to float64: a
    Python float (literal or global), an int literal unified with a float32, or a float64
    scalar argument put it there. (libdevice's own float32 functions use some float64
    internally, sinf's slow path for one, but never promote the data so.)"""
    found = {}
    for e, ptx, _ in compiled[CHECKED]:
        name = f"{e['module'].rsplit('.', 1)[1]}.{e['kernel']}"
        if ptx is None or not _float32_kernel(e) or name in DELIBERATE_F64:
            continue
        n = len(re.findall(r"\bcvt(?:\.\w+)*\.f64\.f32\b", ptx))
        if n:
            found[_label(e)] = n
    assert not found, ("float32 kernels that compute in float64 (scalar(dtype, v) in "
                       "launch.py types a launch argument; typed constants keep literals "
                       "out of expressions):\n" +
                       "\n".join(f"{k}: {n} float32->float64 conversions"
                                 for k, n in found.items()))


def test_every_kernel_was_launched():
    """A kernel no simulator test launches is compiled by nothing either."""
    sigs = _record()
    from numba.cuda.dispatcher import CUDADispatcher

    pkg = importlib.import_module(launch_record.PACKAGE)
    kernels = set()
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for name, obj in vars(mod).items():
            if (isinstance(obj, CUDADispatcher) and not obj.targetoptions.get("device")
                    and obj.py_func.__module__ == mod.__name__):
                kernels.add((mod.__name__, obj.py_func.__qualname__))
    launched = {(e["module"], e["kernel"]) for e in sigs}
    missing = sorted(f"{m.rsplit('.', 1)[1]}.{k}" for m, k in kernels - launched)
    assert not missing, f"kernels that no test in tests/cuda launches: {missing}"


def test_no_launch_passes_a_host_array():
    """A numpy array given to a kernel is copied to the GPU and back at every launch."""
    bad = sorted({_label(e) for e in _record()
                  if any(a[0] == "host_array" for a in e["args"])})
    assert not bad, "kernel launches with host (numpy) arrays:\n" + "\n".join(bad)
