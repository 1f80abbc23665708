"""Kernels, registered per (op type, device kind).

A kernel is a *factory*: ``factory(op, ins, outs) -> step`` receives the op (its attributes)
and the input and output arrays, and returns a zero-argument callable that computes ``outs``
from ``ins``. Compiled plans call the factory once per node with arena views and keep the
step, so running a plan costs one Python call per node; eager mode calls the factory and the
step at once. Kernels write into the outputs they are given and never allocate them.

A kernel that needs scratch memory declares it when it is registered::

    @kernel("Conv2d", workspace=conv_workspace)    # conv_workspace(op, ins, outs) -> bytes
    def conv2d(op, ins, outs, ws): ...              # ws: 64-byte aligned uint8 array

The workspace function sees only shapes and dtypes (``ins``/``outs`` may be TensorSpecs or
arrays), so the memory planner can size the scratch before any data exists and place it in
the arena as a buffer that lives for exactly that step. The factory then carves its scratch
out of ``ws`` (see :func:`carve`) and allocates nothing, at bind time or per step.
"""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from ..errors import DeviceError, DTypeError, UnsupportedOpError
from ..ir.dtypes import is_narrow
from ..ir import bindings
from . import threads

KERNELS: dict[tuple[str, str], Callable] = {}
WORKSPACE: dict[tuple[str, str], Callable] = {}
ALIGN = 64


def kernel(op_type: str, device: str = "cpu", workspace: Callable | None = None):
    """Register the decorated factory as the kernel of ``op_type`` on ``device``.

    ``workspace(op, ins, outs) -> int`` declares the scratch bytes the factory needs; the
    factory then takes a fourth argument, the workspace array.
    """

    def deco(factory):
        KERNELS[(op_type, device)] = factory
        if workspace is not None:
            WORKSPACE[(op_type, device)] = workspace
        else:
            WORKSPACE.pop((op_type, device), None)
        return factory

    return deco


def get_kernel(op_type: str, device: str = "cpu") -> Callable:
    """The registered factory of ``op_type`` on ``device`` (see :func:`bind` to call it)."""
    _load(device)
    try:
        return KERNELS[(op_type, device)]
    except KeyError:
        raise UnsupportedOpError(f"no {device} kernel for op {op_type}") from None


def workspace_bytes(op, ins, outs, device: str = "cpu") -> int:
    """Scratch bytes the kernel of ``op`` needs for these input/output shapes (0 if none)."""
    get_kernel(op.type, device)
    _refuse_narrow(op, ins, outs, device)
    fn = WORKSPACE.get((op.type, device))
    return int(fn(op, ins, outs)) if fn is not None else 0


def bind(op, ins, outs, device: str = "cpu", ws=None) -> Callable:
    """Build the step of ``op`` over arrays ``ins``/``outs`` with workspace ``ws``.

    ``ws`` must hold at least :func:`workspace_bytes` bytes when the kernel declares any.
    """
    threads.apply()
    return _bind(get_kernel(op.type, device), op, ins, outs, device, ws)


def binder(device: str = "cpu") -> Callable:
    """:func:`bind` for the many nodes of one plan, ``(op, ins, outs, ws) -> step``: the
    process-wide set-up (thread policy, kernel table) is checked once, not once per node."""
    threads.apply()
    _load(device)

    def bind_op(op, ins, outs, ws=None):
        factory = KERNELS.get((op.type, device))
        if factory is None:
            raise UnsupportedOpError(f"no {device} kernel for op {op.type}")
        return _bind(factory, op, ins, outs, device, ws)

    return bind_op


def _refuse_narrow(op, ins, outs, device):
    """bfloat16, float8/4 and int4/2 are CPU storage types: no GPU kernel takes them."""
    if device == "cpu":
        return
    for a in (*ins, *outs):
        if a is not None and hasattr(a, "dtype") and is_narrow(a.dtype):
            raise DTypeError(f"{op.type} on {device}: dtype {a.dtype} is supported on the "
                             "cpu device only")


def _bind(factory, op, ins, outs, device, ws) -> Callable:
    _refuse_narrow(op, ins, outs, device)
    fn = WORKSPACE.get((op.type, device))
    if fn is None:
        return factory(op, ins, outs)
    need = int(fn(op, ins, outs))
    if need and (ws is None or ws.nbytes < need):
        raise ValueError(f"kernel {op.type} needs {need} bytes of workspace, got "
                         f"{0 if ws is None else ws.nbytes}")
    return factory(op, ins, outs, None if ws is None else ws[:need])


def carve(ws, *specs):
    """Split workspace ``ws`` into arrays of ``(shape, dtype)``, each 64-byte aligned.

    Use :func:`carved_bytes` with the same specs to size the workspace."""
    out, off = [], 0
    for shape, dtype in specs:
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        out.append(ws[off:off + n].view(dt).reshape(shape))
        off += -(-n // ALIGN) * ALIGN
    if off > ws.nbytes + ALIGN:
        raise ValueError(f"workspace of {ws.nbytes} bytes is too small for {specs}")
    return out


def carved_bytes(*specs) -> int:
    """Bytes that :func:`carve` needs for ``specs``."""
    return sum(-(-int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize // ALIGN) * ALIGN
               for s, d in specs)


_loaded: set[str] = set()
_load_lock = threading.Lock()


def _load(device: str) -> None:
    # Marked loaded only after the import finished: a second thread must wait for the
    # registrations, not find an empty table.
    if device in _loaded:
        return
    with _load_lock:
        if device in _loaded:
            return
        if device == "cpu":
            from .kernels import cpu  # noqa: F401  (registers on import)
        elif device == "cuda":
            from .kernels import cuda  # noqa: F401
        _loaded.add(device)


def run_eager(op, inputs, outputs) -> None:
    """Run one op at once: allocate its outputs, build the step, call it.

    Workspace comes from the device's scratch pool (one per device and thread, grown to the
    largest request and reused), never from a fresh allocation per call. Class indices are
    checked before the kernel runs; inside a transaction (a Model step) the inputs the op
    mutates are journalled first, so a failure later in the step can undo it."""
    from .checks import active_journal, check_op_indices
    from .device import get_default_device, scratch

    device = inputs[0].device if inputs else get_default_device()
    for x in inputs:
        if x.device != device:
            raise DeviceError(f"{op.type}: input {x.name!r} is on {x.device}, the first input "
                              f"on {device}; move tensors with to_device() first")
    check_op_indices(op, inputs)
    journal = active_journal()
    if journal is not None:
        for k in op.mutates:
            journal.record(inputs[k].data, device)
    outs = [device.empty(t.shape, t.dtype) for t in outputs]
    for o, i in op.alias.items():  # views, as inside a plan: the kernel then does nothing
        outs[o] = inputs[i].data.reshape(outputs[o].shape)
    ins = [x.data for x in inputs]
    kind = device.kind
    need = workspace_bytes(op, ins, outs, kind)
    ws = scratch(device, need) if need else None
    with device.activate():
        bind(op, ins, outs, kind, ws)()
    for t, a in zip(outputs, outs):
        t.data = a


# Ops called on concrete tensors run through here; the IR reaches it through its bindings so
# that it never imports the runtime.
bindings.bind("run_eager", run_eager)
