"""The CUDA runtime under :class:`~singa_graph.runtime.device.CudaDevice`.

numba.cuda (the ``numba-cuda`` package, ``pip install 'singa_graph[cuda]'``) is imported
here on first use only, so CPU programs never pay for it. Device arrays are numba's
``DeviceNDArray``; the only operations used on them are those every numba.cuda array has:
slicing, ``reshape``/``view`` of contiguous arrays, host<->device copies, and kernels. With
``NUMBA_ENABLE_CUDASIM=1`` in the environment before numba is imported, the same code runs
on numba's CUDA simulator (one Python thread per GPU thread), which is how the CPU-only test
machines check every CUDA kernel.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from ..errors import DeviceError

_lock = threading.Lock()
_mod: dict = {}

SIMULATOR_SWITCH = "NUMBA_ENABLE_CUDASIM=1"


def numpy_compat() -> None:
    """Let numba-cuda <= 0.30 compile kernels under NumPy >= 2.5.

    numba-cuda's target registries (loaded at the first kernel compile) register an
    overload for ``np.row_stack``, which NumPy 2.5 removed; without it every compile fails
    with AttributeError. ``row_stack`` was always an alias of ``vstack``, so restoring the
    alias changes no NumPy behaviour. Called before numba.cuda is imported (idempotent).
    """
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


def cuda():
    """The ``numba.cuda`` module, imported on first use (DeviceError if missing)."""
    mod = _mod.get("cuda")
    if mod is None:
        with _lock:
            mod = _mod.get("cuda")
            if mod is None:
                numpy_compat()
                try:
                    from numba import cuda as mod
                except ImportError as e:  # pragma: no cover - depends on the install
                    raise DeviceError(
                        "the CUDA runtime needs numba-cuda: pip install 'singa_graph[cuda]' "
                        f"({e})") from None
                _mod["cuda"] = mod
    return mod


def simulated() -> bool:
    """True when numba.cuda runs on its CPU simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def available() -> bool:
    """True when a CUDA device (or the simulator) can run kernels."""
    try:
        return bool(cuda().is_available())
    except DeviceError:
        return False


def require(device_id: int) -> None:
    """Raise a :class:`DeviceError` that says what to do when GPU ``device_id`` is absent."""
    if not available():
        hint = ("" if "NUMBA_ENABLE_CUDASIM" not in os.environ else
                " (NUMBA_ENABLE_CUDASIM is set, but only takes effect when it is set before "
                "numba is first imported)")
        raise DeviceError(
            f"create_cuda_gpu({device_id}): no CUDA GPU is available{hint}. Without a GPU, "
            f"set {SIMULATOR_SWITCH} in the environment before importing singa_graph to run "
            "the CUDA kernels on numba's simulator (slow; for tests), or use "
            "device.create_cpu_device()")
    count = len(cuda().gpus)
    if not 0 <= device_id < count:
        raise DeviceError(f"create_cuda_gpu({device_id}): this machine has {count} CUDA "
                          f"device(s), numbered 0 to {count - 1}")


def is_device_array(a) -> bool:
    """True for numba.cuda device arrays (the simulator's too) and anything else that has
    ``__cuda_array_interface__`` (CuPy arrays)."""
    if a is None or isinstance(a, np.ndarray):
        return False
    return bool(getattr(a, "__cuda_ndarray__", False)) or \
        hasattr(a, "__cuda_array_interface__")


def address(a) -> int:
    """The device address of the first element of device array ``a``."""
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    return int(a._ary.__array_interface__["data"][0])  # the simulator's host-backed array


def empty(shape, dtype):
    """An uninitialised device array."""
    return cuda().device_array(tuple(shape), np.dtype(dtype))


def put(a, dtype=None):
    """``a`` as a C-contiguous device array: device arrays are kept, host data is copied."""
    if is_device_array(a):
        return a
    host = np.asarray(a, dtype=dtype, order="C")  # ascontiguousarray would make 0-d 1-d
    return cuda().to_device(host)


def get(a) -> np.ndarray:
    """A host copy of device array ``a`` (host arrays are returned as they are)."""
    if not is_device_array(a):
        return np.asarray(a)
    out = np.empty(a.shape, a.dtype)
    if out.size:
        a.copy_to_host(out)
    return out


def copy(dst, src) -> None:
    """Copy ``src`` (a host or device array of ``dst``'s size) into device array ``dst``."""
    if dst.size == 0:
        return
    if not is_device_array(src):
        src = np.asarray(src, dtype=dst.dtype, order="C").reshape(tuple(dst.shape))
    elif src.dtype != dst.dtype:
        raise DeviceError(f"device copy from {src.dtype} to {dst.dtype}: cast it first")
    dst.copy_to_device(src)


def fill(dst, value) -> None:
    """Set every element of device array ``dst`` to ``value`` (a kernel: no host copy)."""
    if dst.size == 0:
        return
    from .kernels.cuda.launch import fill as fill_kernel

    fill_kernel(dst, value)


def pinned(shape, dtype) -> np.ndarray:
    """A page-locked host array: host<->device copies of feeds and fetches go through
    these, so the copy engine reads them without an extra staging copy."""
    return cuda().pinned_array(tuple(shape), np.dtype(dtype))


def synchronize() -> None:
    """Wait until every kernel and copy queued on the current device has finished."""
    cuda().synchronize()


def device_name(device_id: int) -> str:
    """The GPU's name (``"simulator"`` under the CUDA simulator)."""
    if simulated():
        return "CUDA simulator"
    with cuda().gpus[device_id]:
        name = cuda().get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)
