"""Devices: where tensors live and which kernel table runs their ops.

A device is a small value object. The CPU device is always there; the CUDA device exists once
a GPU runtime is available (see :func:`create_cuda_gpu`).
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import DeviceError
from ..ir.tensor_methods import CallableInt


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
    """The host CPU; kernels are Numba ``@njit`` functions and BLAS calls."""

    kind = "cpu"


class CudaDevice(Device):
    """An NVIDIA GPU driven through numba.cuda."""

    kind = "cuda"


_default = CpuDevice(0)

def aligned_bytes(n: int, align: int = 64) -> np.ndarray:
    """A fresh uint8 array of ``n`` bytes whose start is ``align``-byte aligned."""
    raw = np.empty(n + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + n]


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
        buf = pools[key] = aligned_bytes(nbytes)
    return buf[:nbytes]


def scratch_bytes(device=None) -> int:
    """Bytes the calling thread's eager scratch pool of ``device`` holds now."""
    key = (device.kind, device.id) if device is not None else ("cpu", 0)
    buf = getattr(_pools, "by_device", {}).get(key)
    return 0 if buf is None else buf.nbytes


def get_default_device() -> Device:
    """The device tensors go to when none is named (the CPU)."""
    return _default


def create_cpu_device() -> CpuDevice:
    """SINGA-compatible constructor of the CPU device."""
    return _default


def create_cuda_gpu(id: int = 0) -> CudaDevice:
    """SINGA-compatible constructor of a CUDA device.

    Raises :class:`DeviceError` while the GPU runtime is not available in this build.
    """
    raise DeviceError(
        "create_cuda_gpu: the CUDA runtime of singa_graph is not available yet; "
        "use device.create_cpu_device()"
    )


def create_cuda_gpu_on(id: int) -> CudaDevice:
    return create_cuda_gpu(id)
