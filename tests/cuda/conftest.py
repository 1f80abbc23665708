"""CUDA tests run where numba.cuda can run kernels: on a real GPU, or on numba's CUDA
simulator, which must be switched on before numba is first imported. ``make test`` runs
this directory in a process of its own with ``NUMBA_ENABLE_CUDASIM=1``; in the main test
process of a machine without a GPU they are not collected, and one placeholder test is
skipped with that reason."""
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from launch_record import Recorder

from singa_graph.runtime.gpu import numpy_compat

numpy_compat()  # numba-cuda <= 0.30 compiles nothing under NumPy >= 2.5 without it

try:
    from numba import config as _numba_config
    from numba import cuda as _cuda

    _SIM = bool(_numba_config.ENABLE_CUDASIM)
    _RUNNABLE = _SIM or _cuda.is_available()
    _WHY = "" if _RUNNABLE else (
        "no CUDA GPU here; these tests run on the CUDA simulator in a process of their own "
        "(make test does: NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda)")
except ImportError as e:  # numba-cuda missing
    _RUNNABLE, _SIM, _WHY = False, False, f"numba-cuda is not installed ({e})"


def _thread_safe_shared_arrays() -> bool:
    """Make the simulator's ``cuda.shared.array`` safe to call from a block's threads at
    once. It keys a block's arrays by the calling line and creates one on a miss, a check
    and then a set with no lock (numba-cuda 0.30): two threads that interleave there get
    two different "shared" arrays, and a reduction over them goes wrong. The default 5 ms
    switch interval let each thread run that far alone; a short one (below) does not.
    Also keys by frame, not by ``traceback.extract_stack``, which read source files on
    every call. False (and nothing changed) where the simulator's internals differ."""
    try:
        from numba.cuda.simulator import kernelapi
        from numba.np import numpy_support
        from numba.core import types
    except ImportError:
        return False
    shared = getattr(kernelapi, "FakeCUDAShared", None)
    if shared is None or not hasattr(shared(0), "_allocations"):
        return False
    original, lock = shared.array, threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:
            return original(self, shape, dtype, alignment)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            res = self._allocations.get(key)
            if res is None:
                res = self._allocations[key] = np.empty(shape, dtype)
        return res

    shared.array = array
    return True


if _SIM and _thread_safe_shared_arrays():
    # The simulator runs a block's threads as Python threads while the launching thread
    # polls them in a loop that never sleeps; a woken thread (after syncthreads, or started)
    # then waits for the poller to give up the GIL, up to the switch interval (5 ms by
    # default) each time. At 50 us the simulator suite ran in 3 minutes instead of 15 (a
    # budgeted CNN training test: 124 s -> 13 s).
    sys.setswitchinterval(5e-5)


_HERE = Path(__file__).parent
_deselected: list = []


def pytest_deselected(items):
    _deselected.extend(i for i in items if Path(str(i.fspath)).parent == _HERE)


def pytest_ignore_collect(collection_path, config):
    """Where these tests cannot run, their modules are not even imported: building their
    cases runs CPU kernels (and compiled them in every test process of a cold cache). One
    placeholder test (:class:`_NotHere`) says why instead."""
    if not _RUNNABLE and collection_path.parent == _HERE and \
            collection_path.name.startswith("test_"):
        return True
    return None


class _NotHere(pytest.Item):
    """Skips with the reason why tests/cuda cannot run in this process."""

    def runtest(self):
        pytest.skip(_WHY)

    def reportinfo(self):
        return self.path, None, "tests/cuda"


class _Placeholder(pytest.File):
    def collect(self):
        yield _NotHere.from_parent(self, name="tests/cuda")


def pytest_collect_file(file_path, parent):
    if not _RUNNABLE and file_path == _HERE / "conftest.py":
        return _Placeholder.from_parent(parent, path=file_path)
    return None


@pytest.fixture(scope="session")
def simulated():
    """True on the CUDA simulator (tiny shapes only), False on a real GPU."""
    return _SIM


@pytest.fixture(scope="session")
def gpu():
    from singa_graph import device

    return device.create_cuda_gpu()


@pytest.fixture(scope="session", autouse=True)
def launch_record(request):
    """On the simulator, record every kernel launch's argument types for the PTX check
    (tests/ptx), which compiles them for a real GPU. Only a run of the whole directory
    writes the record: a partial one (-k, single files, a -x stop) would leave kernels out."""
    if not _SIM:
        yield None
        return
    recorder = Recorder()
    recorder.install()
    try:
        yield recorder
    finally:
        recorder.uninstall()
    session = request.session
    ran = {Path(str(i.fspath)).name for i in session.items}
    whole = {p.name for p in _HERE.glob("test_*.py")} <= ran
    if whole and not _deselected and not (session.shouldfail or session.shouldstop):
        recorder.write()
