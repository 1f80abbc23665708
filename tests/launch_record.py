"""A record of the CUDA kernel launches that the simulator tests make, for the PTX check.

numba's CUDA simulator runs a kernel as Python: it never types or compiles it, so a kernel
can pass every simulator test and still fail to compile for a GPU (or compile to float64
arithmetic where float32 was meant). ``tests/cuda/conftest.py`` records, while the whole
``tests/cuda`` suite runs on the simulator, the module, name and argument types of every
kernel launch; ``tests/ptx/test_ptx_compile.py`` then compiles each recorded signature for a
real GPU with ``cuda.compile_ptx``, which needs NVVM but no GPU.

Argument types are numba's own ``typeof`` of each launch argument, which is what a real
``@cuda.jit`` dispatcher specialises on: the simulator's arrays carry the same
``_numba_type_`` as numba's DeviceNDArray. The record is JSON under ``test-artifacts/``
(git-ignored) and carries a digest of every kernel module, so a record older than the
kernel sources is recognised as stale rather than compiled.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "test-artifacts" / "cuda_launches.json"
KERNELS = ROOT / "singa_graph" / "runtime" / "kernels" / "cuda"
PACKAGE = "singa_graph.runtime.kernels.cuda"
FORMAT = 1


def source_digests() -> dict:
    """``{module: sha256 prefix}`` of every CUDA kernel module as it is now on disk."""
    return {f"{PACKAGE}.{p.stem}": hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in sorted(KERNELS.glob("*.py")) if p.stem != "__init__"}


def describe(value) -> list:
    """A JSON descriptor of the numba type a real CUDA dispatcher gives launch argument
    ``value``; host (numpy) arrays are marked: a GPU copies them at every launch."""
    import numpy as np
    from numba import typeof
    from numba.core import types
    from numba.core.typing.typeof import Purpose

    t = typeof(value, Purpose.argument)
    d = _desc(t, types)
    if isinstance(value, np.ndarray):
        d[0] = "host_array"
    return d


def _desc(t, types) -> list:
    if isinstance(t, types.Array):
        return ["array", str(t.dtype), t.ndim, t.layout]
    if isinstance(t, types.BaseTuple):
        return ["tuple", [_desc(x, types) for x in t.types]]
    if isinstance(t, (types.Boolean, types.Integer, types.Float, types.Complex)):
        return ["scalar", str(t)]
    return ["other", str(t)]


def numba_type(d):
    """The numba type of descriptor ``d`` (see :func:`describe`)."""
    import numpy as np
    from numba.core import types
    from numba.np.numpy_support import from_dtype

    kind = d[0]
    if kind in ("array", "host_array"):
        return types.Array(from_dtype(np.dtype(d[1])), d[2], d[3])
    if kind == "tuple":
        return types.BaseTuple.from_types([numba_type(x) for x in d[1]])
    if kind == "scalar":
        return from_dtype(np.dtype(d[1]))
    raise ValueError(f"no numba type for launch argument {d[1]!r}")


class Recorder:
    """Collects ``(module, kernel, argument descriptors)`` of every simulated launch."""

    def __init__(self):
        self.launches: dict = {}
        self.sources: dict = {}
        self._original = None

    def install(self) -> None:
        """Wrap the simulator's kernel call (the one place every launch goes through)."""
        from numba.cuda.simulator import kernel as simk

        self.sources = source_digests()  # the sources the run starts with, not ends with

        original = self._original = simk.FakeCUDAKernel.__call__
        recorder = self

        def call(kern, *args):
            # device functions called from a kernel go through __call__ too: skip them
            if not (kern._device or simk._kernel_context):
                recorder.add(kern.fn, args)
            return original(kern, *args)

        simk.FakeCUDAKernel.__call__ = call

    def uninstall(self) -> None:
        from numba.cuda.simulator import kernel as simk

        if self._original is not None:
            simk.FakeCUDAKernel.__call__ = self._original
            self._original = None

    def add(self, fn, args) -> None:
        if not fn.__module__.startswith(PACKAGE):  # a test's own kernel: not shipped
            return
        descs = json.dumps([describe(a) for a in args])
        key = (fn.__module__, fn.__qualname__, descs)
        entry = self.launches.get(key)
        if entry is None:
            test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
            self.launches[key] = entry = {"module": key[0], "kernel": key[1],
                                          "args": json.loads(descs), "test": test,
                                          "launches": 0}
        entry["launches"] += 1

    def write(self, path: Path = RECORD) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"format": FORMAT, "sources": self.sources,
                "signatures": sorted(self.launches.values(),
                                     key=lambda e: (e["module"], e["kernel"],
                                                    json.dumps(e["args"])))}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1))
        tmp.replace(path)


def load(path: Path = RECORD):
    """The record as written by :meth:`Recorder.write`, or None if there is none."""
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return body if body.get("format") == FORMAT else None
