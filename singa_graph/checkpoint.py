"""Checkpoints of a Model: parameters, buffers, optimizer state and aux states in one zip file.

Both directions are transactional:

* :func:`save` builds every entry first (refusing aux states it cannot store faithfully),
  writes them to a temporary file beside the target, fsyncs it and renames it into place, so
  the path always holds either the previous checkpoint or the new one. Temporary files that a
  killed process left behind for the same path are removed by the next save.
* :func:`load` reads and validates the whole file (names, shapes and dtypes of parameters,
  buffers and optimizer state, the optimizer's type and hyperparameters, complete or
  refused) before it writes anything into the model.

Layout of the file (``numpy.savez``, loadable without pickle): ``state/<name>`` for
parameters and buffers, ``opt/<param>/<slot>`` for optimizer state (every slot of every
parameter, zeros for state not created yet), ``opthyper/<name>`` for hyperparameters and the
step counter, ``meta/optimizer`` for the optimizer type(s), ``aux/<key>`` for aux arrays and
``meta/aux_json`` for aux states stored as JSON.
"""
from __future__ import annotations

import json
import os
import threading
import uuid
import zipfile

import numpy as np

from .errors import CheckpointError
from .ir.tensor import Tensor
from .opt import check_hyper

_AUX_JSON = "meta/aux_json"
_in_flight: set[str] = set()  # temporary files this process is writing right now
_in_flight_lock = threading.Lock()


# ---------------------------------------------------------------------------- saving
def _aux_entries(path: str, aux: dict) -> tuple[dict, dict]:
    """``(arrays, json values)`` for the aux states; raises for what cannot round-trip."""
    arrays, as_json = {}, {}
    for k, v in aux.items():
        if not isinstance(k, str):
            raise CheckpointError(f"checkpoint {path!r}: aux state keys must be strings, got "
                                  f"{k!r}")
        if isinstance(v, Tensor):
            v = v.host_data()
        if isinstance(v, (np.ndarray, np.generic, bool, int, float, str)):
            a = np.asarray(v)
            if a.dtype.hasobject:
                raise CheckpointError(f"checkpoint {path!r}: aux state {k!r} is an object "
                                      "array, which cannot be loaded without pickle")
            arrays[f"aux/{k}"] = a
            continue
        try:
            back = json.loads(json.dumps(v))
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"checkpoint {path!r}: aux state {k!r} of type "
                                  f"{type(v).__name__} can be neither an array nor JSON: "
                                  f"{e}") from None
        if back != v:
            raise CheckpointError(f"checkpoint {path!r}: aux state {k!r} would not come back "
                                  f"equal through JSON (tuples become lists, keys strings): "
                                  f"{v!r} -> {back!r}")
        as_json[k] = v
    return arrays, as_json


def collect(model, path: str, aux_states: dict | None) -> dict[str, np.ndarray]:
    """Every entry of the checkpoint of ``model``, as arrays (nothing is written)."""
    arrays = {f"state/{k}": t.host_data() for k, t in model.get_states().items()}
    params = model.get_params()
    for o in model._optimizers():
        have = o.state_tensors()
        for key, (shape, dtype) in o.state_specs(params).items():
            t = have.get(key)
            if t is not None:
                arrays[f"opt/{key}"] = t.host_data()
            else:  # not created yet: what it will start from
                arrays[f"opt/{key}"] = np.asarray(o._pending.get(key, np.zeros(shape, dtype)))
        arrays.update({f"opthyper/{k}": np.asarray(v) for k, v in o.hyper_states().items()})
    arrays["meta/optimizer"] = np.array(",".join(type(o).__name__
                                                 for o in model._optimizers()))
    aux_arrays, aux_json = _aux_entries(path, aux_states or {})
    arrays.update(aux_arrays)
    if aux_json:
        arrays[_AUX_JSON] = np.array(json.dumps(aux_json))
    return arrays


def _temp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}."


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def remove_stale_temps(path: str) -> list[str]:
    """Remove the temporary files of earlier saves to ``path`` whose process is gone (or
    that this process no longer writes); returns the removed paths."""
    d = os.path.dirname(os.path.abspath(path))
    prefix, removed = _temp_prefix(path), []
    try:
        names = os.listdir(d)
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        pid = name[len(prefix):-4].split(".")[0]
        full = os.path.join(d, name)
        with _in_flight_lock:
            if full in _in_flight:
                continue
        if not pid.isdigit() or (int(pid) != os.getpid() and _pid_alive(int(pid))):
            continue
        try:
            os.unlink(full)
            removed.append(full)
        except OSError:
            pass
    return removed


def save(model, path: str, aux_states: dict | None = None) -> None:
    """Write the checkpoint of ``model`` to ``path`` atomically (see the module docstring)."""
    path = os.fspath(path)
    arrays = collect(model, path, aux_states)
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise CheckpointError(f"cannot save checkpoint {path!r}: folder {d!r} does not exist")
    remove_stale_temps(path)
    tmp = os.path.join(d, f"{_temp_prefix(path)}{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    with _in_flight_lock:
        _in_flight.add(tmp)
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(d)
    except OSError as e:
        raise CheckpointError(f"cannot save checkpoint {path!r}: {e}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        with _in_flight_lock:
            _in_flight.discard(tmp)


def _fsync_dir(d: str) -> None:
    """Make the rename durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- loading
def read(path: str) -> dict[str, np.ndarray]:
    """Every array of the checkpoint file at ``path``."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise CheckpointError(f"cannot read checkpoint {path!r}: {e}") from e


def _compare(problems, key, have, shape, dtype) -> None:
    if have.shape != tuple(shape):
        problems.append(f"{key}: checkpoint has shape {have.shape}, the model {tuple(shape)}")
    elif have.dtype != np.dtype(dtype):
        problems.append(f"{key}: checkpoint has dtype {have.dtype}, the model {np.dtype(dtype)}")


def _check_names(problems, what, want: set, have: set) -> None:
    if want - have:
        problems.append(f"{what} missing in checkpoint: {sorted(want - have)}")
    if have - want:
        problems.append(f"{what} not in the model: {sorted(have - want)}")


def validate(model, data: dict) -> list[str]:
    """Everything that keeps ``data`` from loading into ``model`` completely."""
    problems: list[str] = []
    states = model.get_states()
    _check_names(problems, "parameters/buffers", {f"state/{k}" for k in states},
                 {k for k in data if k.startswith("state/")})
    for k, t in states.items():
        if f"state/{k}" in data:
            _compare(problems, f"state/{k}", data[f"state/{k}"], t.shape, t.dtype)
    opts = model._optimizers()
    saved = str(data["meta/optimizer"]) if "meta/optimizer" in data else ""
    mine = ",".join(type(o).__name__ for o in opts)
    if saved != mine:
        return problems + [f"checkpoint holds optimizer state of {saved or 'no optimizer'!r}, "
                           f"the model has {mine or 'no optimizer'!r}"]
    specs, hypers = {}, {}
    params = model.get_params()
    for o in opts:
        specs.update({f"opt/{k}": v for k, v in o.state_specs(params).items()})
        hypers.update({f"opthyper/{k}": o for k in o.hyper_states()})
    _check_names(problems, "optimizer state", set(specs),
                 {k for k in data if k.startswith("opt/")})
    for k, (shape, dtype) in specs.items():
        if k in data:
            _compare(problems, k, data[k], shape, dtype)
    _check_names(problems, "optimizer hyperparameters", set(hypers),
                 {k for k in data if k.startswith("opthyper/")})
    for k, o in hypers.items():
        if k in data:
            problems += _hyper_problems(k, data[k], o)
    if _AUX_JSON in data:
        try:
            json.loads(str(data[_AUX_JSON]))
        except ValueError as e:
            problems.append(f"{_AUX_JSON}: not JSON: {e}")
    return problems


def _hyper_problems(key: str, v: np.ndarray, o) -> list[str]:
    name = key[len("opthyper/"):]
    if v.shape != () or v.dtype.kind not in "biuf":
        return [f"{key}: expected a number, got an array of shape {v.shape}, dtype {v.dtype}"]
    if name == "step_counter":
        return [] if v >= 0 and v == int(v) else [f"{key}: {v} is not a step count"]
    try:
        check_hyper(type(o).__name__, o._bounds, name, v[()])
    except (TypeError, ValueError) as e:
        return [f"{key}: {e}"]
    return []


def load(model, path: str) -> dict:
    """Validate the checkpoint at ``path`` completely, then restore it into ``model``;
    returns its aux states. Raises :class:`CheckpointError` (changing nothing) when the file
    is unreadable or does not match the model."""
    path = os.fspath(path)
    data = read(path)
    problems = validate(model, data)
    if problems:
        raise CheckpointError(f"checkpoint {path!r} does not match the model: "
                              + "; ".join(problems))
    for k, t in model.get_states().items():
        t.copy_from_numpy(data[f"state/{k}"])  # in place: compiled plans stay bound
    for o in model._optimizers():
        o.load_states({k[4:]: v for k, v in data.items() if k.startswith("opt/")},
                      {k[9:]: v for k, v in data.items() if k.startswith("opthyper/")})
    # SINGA returns the aux states as Tensors; JSON values (dicts, lists) come back as such
    aux = {k[4:]: Tensor(data=v, requires_grad=False) for k, v in data.items()
           if k.startswith("aux/")}
    if _AUX_JSON in data:
        aux.update(json.loads(str(data[_AUX_JSON])))
    return aux
