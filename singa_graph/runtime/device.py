"""Devices: where tensors live and which kernel table runs their ops.

A device is a small value object. The CPU device is always there; the CUDA device exists once
a GPU runtime is available (see :func:`create_cuda_gpu`).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from .. import host
from ..errors import DeviceError
from ..ir import bindings
from ..ir.tensor_methods import CallableInt
from . import gpu  # numba.cuda itself is imported only when a GPU is used


class Device:
    """A place that holds buffers and runs kernels. ``kind`` selects the kernel table."""

    kind = "abstract"

    def __init__(self, id: int = 0):
        self.id = CallableInt(id)  # an int attribute that SINGA code may call: dev.id()
        self.graph_enabled_ = True
        self.verbosity = 0

    def __repr__(self):
        return f"{type(self).__name__}(id={self.id})"

    def __eq__(self, other):
        return isinstance(other, Device) and (self.kind, self.id) == (other.kind, other.id)

    def __hash__(self):
        return hash((self.kind, self.id))

    # SINGA names. SINGA's device buffers ops into one graph per device; here each Model
    # compiles its own plans (Model.compile / Model.graph choose graph or eager mode), so the
    # device-level graph calls only record the choice or are no-ops.
    def EnableGraph(self, enable: bool = True):
        """Record SINGA's graph switch; the mode in force is each Model's (``graph()``)."""
        self.graph_enabled_ = bool(enable)

    def graph_enabled(self) -> bool:
        return self.graph_enabled_

    def ResetGraph(self):
        """No-op: plans belong to models and are rebuilt by ``Model.compile``."""

    def RunGraph(self, serial: bool = False):
        """No-op: a compiled plan runs when the model is called."""

    def Sync(self):
        """No-op: kernels have finished when a step returns."""

    def SetVerbosity(self, verbosity: int):
        """Record the verbosity of :meth:`PrintTimeProfiling`."""
        self.verbosity = int(verbosity)

    def PrintTimeProfiling(self):
        """Per-op time profiles come from ``Model.profile(x, y)`` (or ``plan.profile``),
        which times each step of a plan; this prints where to find them."""
        print("time profiling: call model.profile(x, y) for per-op times of the compiled plan")

    def SetRandSeed(self, seed: int):
        """SINGA-compatible: seeds the generator used by initialisers on this device."""
        from .. import random as _random

        _random.seed(seed)


class CpuDevice(Device):
    """The host CPU; kernels are Numba ``@njit`` functions and BLAS calls. Arrays are numpy
    arrays."""

    kind = "cpu"

    # The array protocol every device provides; plans, eager mode and the user API move
    # data only through it, so none of them needs to know where the bytes live.
    def empty(self, shape, dtype):
        """An uninitialised array on this device, its data on a cache line (host.py)."""
        return host.aligned_empty(shape, dtype)

    def zeros(self, shape, dtype):
        a = host.aligned_empty(shape, dtype)
        a.fill(0)
        return a

    def put(self, a, dtype=None):
        """``a`` (host data, or an array of this device) as an array of this device."""
        return np.asarray(a, dtype)

    def get(self, a) -> np.ndarray:
        """``a`` (an array of this device) readable on the host; on the CPU, ``a`` itself."""
        return a

    def copy(self, dst, src) -> None:
        """Copy ``src`` (host data or an array of this device) into ``dst``."""
        np.copyto(dst, src, casting="unsafe")

    def fill(self, dst, value) -> None:
        dst.fill(value)

    def duplicate(self, a):
        """A new array of this device holding a copy of ``a``."""
        return a.copy()

    def arena(self, nbytes: int):
        """One 64-byte aligned block of ``nbytes`` bytes: the arena of a plan."""
        return aligned_bytes(nbytes)

    def staging(self, shape, dtype):
        """The host buffer a plan copies a feed or fetch through (none needed here)."""
        return None

    def is_array(self, a) -> bool:
        return isinstance(a, np.ndarray)

    def synchronize(self) -> None:
        """Wait for queued work (CPU kernels have finished when they return)."""

    def activate(self):
        """A context manager that makes this device current for kernel launches."""
        return contextlib.nullcontext()


class CudaDevice(Device):
    """An NVIDIA GPU driven through numba.cuda (see :mod:`singa_graph.runtime.gpu`).

    Tensors on it hold numba device arrays; a plan's arena is one ``cuda.device_array`` of
    bytes with every transient buffer and all kernel workspace a view at its planned offset.
    Parameters and optimizer state live on the device; only feeds and fetched outputs cross
    to the host, through page-locked buffers that the plan allocates once.
    """

    kind = "cuda"

    def __init__(self, id: int = 0):
        gpu.require(int(id))
        super().__init__(id)
        self.name = gpu.device_name(int(id))

    def __repr__(self):
        return f"CudaDevice(id={self.id}, {self.name!r})"

    def empty(self, shape, dtype):
        with self.activate():
            return gpu.empty(shape, dtype)

    def zeros(self, shape, dtype):
        a = self.empty(shape, dtype)
        self.fill(a, 0)
        return a

    def put(self, a, dtype=None):
        with self.activate():
            return gpu.put(a, dtype)

    def get(self, a) -> np.ndarray:
        with self.activate():
            return gpu.get(a)

    def copy(self, dst, src) -> None:
        with self.activate():
            gpu.copy(dst, src)

    def fill(self, dst, value) -> None:
        with self.activate():
            gpu.fill(dst, value)

    def duplicate(self, a):
        b = self.empty(a.shape, a.dtype)
        self.copy(b, a)
        return b

    def arena(self, nbytes: int):
        # cudaMalloc returns 256-byte aligned blocks, more than the planner's 64
        return self.empty((nbytes,), np.uint8)

    def staging(self, shape, dtype):
        with self.activate():
            return gpu.pinned(shape, dtype)

    def is_array(self, a) -> bool:
        return gpu.is_device_array(a)

    def synchronize(self) -> None:
        with self.activate():
            gpu.synchronize()

    def activate(self):
        return gpu.cuda().gpus[int(self.id)]


_default = CpuDevice(0)

def aligned_bytes(n: int, align: int = 64) -> np.ndarray:
    """A fresh uint8 array of ``n`` bytes whose start is ``align``-byte aligned."""
    return host.aligned_empty(n, np.uint8, align)


# Eager scratch: one pool per (device, thread), so that models running eagerly in different
# threads never share scratch bytes; each grows to its largest request and is then reused.
_pools = threading.local()


def scratch(device, nbytes: int) -> np.ndarray:
    """A 64-byte aligned uint8 array of ``nbytes`` from the calling thread's scratch pool of
    ``device`` (eager-mode kernel workspace). Valid until the next call on this thread."""
    key = (device.kind, device.id) if device is not None else ("cpu", 0)
    pools = getattr(_pools, "by_device", None)
    if pools is None:
        pools = _pools.by_device = {}
    buf = pools.get(key)
    if buf is None or buf.nbytes < nbytes:
        buf = pools[key] = (device or _default).arena(nbytes)
    return buf[:nbytes]


def scratch_bytes(device=None) -> int:
    """Bytes the calling thread's eager scratch pool of ``device`` holds now."""
    key = (device.kind, device.id) if device is not None else ("cpu", 0)
    buf = getattr(_pools, "by_device", {}).get(key)
    return 0 if buf is None else buf.nbytes


def get_default_device() -> Device:
    """The device tensors go to when none is named (the CPU)."""
    return _default


bindings.bind("default_device", get_default_device)


def create_cpu_device() -> CpuDevice:
    """SINGA-compatible constructor of the CPU device."""
    return _default


def create_cuda_gpu(id: int = 0) -> CudaDevice:
    """SINGA-compatible constructor of CUDA device ``id`` (numba.cuda; ``pip install
    'singa_graph[cuda]'``).

    Raises :class:`DeviceError` when no GPU is available; the message names the switch
    (``NUMBA_ENABLE_CUDASIM=1``) that runs the CUDA kernels on numba's simulator instead.
    """
    return CudaDevice(id)


def create_cuda_gpu_on(id: int) -> CudaDevice:
    """SINGA-compatible: the CUDA device ``id``."""
    return CudaDevice(id)


def create_cuda_gpus(num: int) -> list:
    """SINGA-compatible: CUDA devices 0 to ``num - 1``."""
    return [CudaDevice(i) for i in range(num)]


def parse(spec) -> Device:
    """A device from a command-line spelling: ``cpu``, ``cuda`` or ``cuda:N``."""
    if isinstance(spec, Device):
        return spec
    s = str(spec).strip().lower()
    if s == "cpu":
        return _default
    if s == "cuda" or s == "gpu":
        return CudaDevice(0)
    if s.startswith(("cuda:", "gpu:")) and s.split(":", 1)[1].isdigit():
        return CudaDevice(int(s.split(":", 1)[1]))
    raise DeviceError(f"unknown device {spec!r}: use cpu, cuda or cuda:N")
