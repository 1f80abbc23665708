"""``Model.save`` / ``Model.load`` of SINGA issue #696: the model as ONNX plus its states.

The file is a zip holding ``model.onnx`` (the exported inference graph; its initialisers
carry the parameter and buffer names) and ``states.npz`` (the ``state`` dict of ``save``).
It is written under a temporary name and renamed into place.
"""
from __future__ import annotations

import io
import os
import tempfile
import warnings
import zipfile

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import CheckpointError, ModelFormatError
from ..ir.tensor import Tensor


def _state_arrays(state: dict) -> dict:
    from ..opt import Optimizer

    out = {}
    for k, v in state.items():
        if isinstance(v, Optimizer):
            out.update({f"{k}/{n}": a for n, a in v.get_states().items()})
        else:
            out[k] = v.host_data() if isinstance(v, Tensor) else np.asarray(v)
    return out


def save_model(model, path: str, state: dict) -> None:
    from .exporter import export

    proto = export(model)
    buf = io.BytesIO()
    np.savez(buf, **_state_arrays(state))
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".model-", suffix=".zip", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("model.onnx", proto.SerializeToString())
                z.writestr("states.npz", buf.getvalue())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_model(model, path: str, include_state: bool = False):
    """Copy the saved parameters and buffers into ``model`` by name, warning about names
    that do not match; return the saved states when ``include_state``."""
    try:
        with zipfile.ZipFile(path) as z:
            proto = onnx.load_from_string(z.read("model.onnx"))
            with np.load(io.BytesIO(z.read("states.npz")), allow_pickle=False) as s:
                states = {k: s[k] for k in s.files}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"cannot read saved model {path!r}: {e}") from None
    except Exception as e:  # protobuf errors
        raise ModelFormatError(f"{path!r} holds no valid ONNX model: {e}") from None
    saved = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    mine = model.get_states()
    shape_errors = [f"{k}: model {mine[k].shape}, file {saved[k].shape}"
                    for k in set(saved) & set(mine) if tuple(mine[k].shape) != saved[k].shape]
    if shape_errors:
        raise CheckpointError(f"{path!r} does not fit the model: " + "; ".join(shape_errors))
    for k in sorted(set(saved) & set(mine)):
        mine[k].copy_from_numpy(saved[k])
    if set(mine) - set(saved):
        warnings.warn(f"not in {path!r}, left as they are: {sorted(set(mine) - set(saved))}")
    if set(saved) - set(mine):
        warnings.warn(f"in {path!r} but not in the model, ignored: "
                      f"{sorted(set(saved) - set(mine))}")
    return states if include_state else None
