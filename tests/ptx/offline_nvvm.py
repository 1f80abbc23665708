"""Compile numba.cuda kernels to PTX on a machine with no GPU and no CUDA driver.

``numba.cuda.compile_ptx(pyfunc, sig, cc=...)`` needs only libNVVM and libdevice, but three
lookups on its way ask for more than that. :func:`offline` bridges exactly those three and
nothing else, for the duration of a ``with`` block:

1. ``cuda_paths.get_cuda_paths()`` lists every toolkit library eagerly and raises when
   NVRTC is missing, although PTX generation never uses NVRTC (a toolkit of nvcc and NVVM
   only, such as the ``/usr/local/cuda`` of our CI machines, has no NVRTC): a missing
   NVRTC is reported as absent instead of raised.
2. The target architecture option asks NVRTC which architectures it supports; numba's own
   ``NUMBA_FORCE_CUDA_CC`` setting (``config.FORCE_CUDA_CC``) skips that question.
3. Device functions (``@cuda.jit(device=True)``) compile for "the current device", which
   asks the driver for its compute capability; with no GPU there is none, so the
   dispatcher module is given a stand-in device of the target's compute capability.

:func:`toolkit` finds libNVVM and libdevice with numba-cuda's own lookup (pip ``nvidia-*``
wheels, conda, ``CUDA_HOME``/``CUDA_PATH``, the system loader, ``/usr/local/cuda``) and
falls back to the newest ``/usr/local/cuda-*`` that has them; ptxas, where there is one,
assembles the PTX for the real architecture as the driver would when loading it.
"""
from __future__ import annotations

import glob
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass


class Unavailable(Exception):
    """No toolkit that can compile PTX here; the message says what is missing."""


@dataclass
class Toolkit:
    nvvm: str
    libdevice: str
    ptxas: str | None  # None: PTX is generated but not assembled


def _missing_ok(get_path, cuda_paths):
    def lookup():
        try:
            return get_path()
        except Exception:  # pathfinder's DynamicLibNotFoundError and kin
            return cuda_paths._env_path_tuple("not found", None)
    return lookup


@contextmanager
def offline(cc: tuple):
    """Let ``cuda.compile_ptx`` target compute capability ``cc`` without a GPU (see the
    module notes for the three lookups bridged); everything is restored on exit. A name
    that a numba-cuda version lacks is left alone: the compile errors then say what the
    version needs instead."""
    from numba.cuda import config
    from numba.cuda import cuda_paths
    from numba.cuda import dispatcher

    class _Device:  # what device-function compilation reads of the current device
        compute_capability = tuple(cc)

    patches = [(config, "FORCE_CUDA_CC", lambda old: tuple(cc)),
               (cuda_paths, "_get_nvrtc_path", lambda old: _missing_ok(old, cuda_paths)),
               (dispatcher, "get_current_device", lambda old: _Device)]
    saved = []
    for mod, name, make in patches:
        if hasattr(mod, name):
            saved.append((mod, name, getattr(mod, name)))
            setattr(mod, name, make(saved[-1][2]))
    try:
        yield
    finally:
        for mod, name, old in saved:
            setattr(mod, name, old)


def _version_key(path: str):
    return [int(n) for n in re.findall(r"\d+", os.path.basename(path))]


def _system_toolkits() -> list:
    """``/usr/local/cuda*`` roots that hold libNVVM and libdevice, newest first."""
    roots = []
    for root in sorted(glob.glob("/usr/local/cuda*"), key=_version_key, reverse=True):
        libs = [p for d in ("nvvm/lib64", "lib64", "lib") for p in
                glob.glob(os.path.join(root, d, "libnvvm.so*"))]
        if libs and os.path.isfile(os.path.join(root, "nvvm/libdevice/libdevice.10.bc")):
            roots.append(root)
    return roots


def _lookup():
    from numba.cuda import cuda_paths

    with offline((9, 0)):
        if hasattr(cuda_paths.get_cuda_paths, "_cached_result"):
            # an earlier look (before CUDA_HOME was set) is cached: look again
            del cuda_paths.get_cuda_paths._cached_result
        paths = cuda_paths.get_cuda_paths()
    return paths["nvvm"].info, paths["libdevice"].info


def toolkit() -> Toolkit:
    """libNVVM, libdevice and ptxas for :func:`offline` compilation (Unavailable if not)."""
    errors = []
    try:
        nvvm, libdevice = _lookup()
    except Exception as e:  # numba-cuda's lookup raises when it finds no libNVVM
        nvvm, libdevice = None, None
        errors.append(str(e).splitlines()[0])
    if not (nvvm and libdevice) and not (os.environ.get("CUDA_HOME")
                                         or os.environ.get("CUDA_PATH")):
        for root in _system_toolkits():
            os.environ["CUDA_HOME"] = root  # numba-cuda and cuda-pathfinder both read it
            try:
                nvvm, libdevice = _lookup()
            except Exception as e:
                errors.append(f"{root}: {str(e).splitlines()[0]}")
            if nvvm and libdevice:
                break
            del os.environ["CUDA_HOME"]
    if not (nvvm and libdevice):
        what = "libNVVM" if not nvvm else "libdevice"
        raise Unavailable(
            f"no {what} to compile CUDA kernels to PTX (looked in pip nvidia-* wheels, conda, "
            f"CUDA_HOME/CUDA_PATH, the system loader and /usr/local/cuda*): install a CUDA "
            f"toolkit or `pip install nvidia-nvvm`. {'; '.join(errors)}".strip())
    return Toolkit(nvvm, libdevice, _ptxas(nvvm))


def _ptxas(nvvm: str):
    """ptxas of the toolkit that ``nvvm`` comes from (None if it has none): another
    toolkit's ptxas may refuse this NVVM's PTX version."""
    d = os.path.dirname(os.path.realpath(nvvm))
    for _ in range(4):
        d = os.path.dirname(d)
        p = os.path.join(d, "bin", "ptxas")
        if os.access(p, os.X_OK):
            return p
    return None
