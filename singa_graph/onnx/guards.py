"""Checks that keep a broken or hostile ONNX file from doing harm.

A model file is data from anywhere. Before the importer allocates anything large or opens
another file, these checks make sure that:

* the model's ops are defined as the importers follow them: the default domain's opset is
  at most the newest the installed ``onnx`` package knows, and in a model older than
  opset 6 (where ONNX dropped the legacy ``consumed_inputs`` of every op) only ops whose
  definition has not changed since are accepted;
* every tensor stored in the model (initialisers, ``Constant`` values, in subgraphs too)
  holds exactly the bytes its dims and type call for, and is no larger than
  :data:`MAX_TENSOR_BYTES`;
* external data lies in a regular file inside the model's folder (no absolute path, no
  ``..`` or symbolic link out of it) and covers the bytes asked for, before it is read;
* nodes that make a tensor whose size is given by values (ConstantOfShape, Expand, Tile,
  Range, Pad, Resize) would not make one larger than :data:`MAX_TENSOR_BYTES`, checked
  before the node is evaluated or imported, and no traced tensor is larger either.

Each failure is a :class:`ModelFormatError` (or an :class:`UnsupportedOpError` for an opset
out of range) that names the tensor or node.
"""
from __future__ import annotations

import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import ModelFormatError, UnsupportedOpError

#: the oldest opset of the default domain the importers follow
MIN_OPSET = 6
#: the largest tensor (in bytes) a model may store or make while it is imported
MAX_TENSOR_BYTES = 1 << 33

# typed fields of a TensorProto and how many entries one element takes there
_FIELDS = {TensorProto.FLOAT: ("float_data", 1), TensorProto.DOUBLE: ("double_data", 1),
           TensorProto.INT64: ("int64_data", 1), TensorProto.UINT64: ("uint64_data", 1),
           TensorProto.UINT32: ("uint64_data", 1), TensorProto.COMPLEX64: ("float_data", 2),
           TensorProto.COMPLEX128: ("double_data", 2)}
for _t in (TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT16,
           TensorProto.UINT8, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.BFLOAT16):
    _FIELDS[_t] = ("int32_data", 1)


def check_opset(model: onnx.ModelProto) -> None:
    """Refuse a default-domain opset newer than onnx knows, and below MIN_OPSET every op
    whose definition at the model's opset is an older one than at MIN_OPSET (Relu-1 with
    its legacy ``consumed_inputs``); an op unchanged since (Not-1) means the same and is
    imported."""
    newest = onnx.defs.onnx_opset_version()
    for imp in model.opset_import:
        if imp.domain not in ("", "ai.onnx"):
            continue
        v = int(imp.version)
        if v > newest:
            raise UnsupportedOpError(
                f"the model imports opset {v} of the default ONNX domain, newer than the "
                f"newest that onnx {onnx.__version__} knows ({newest})")
        if v < MIN_OPSET:
            old = sorted({f"{n.op_type}-{_since(n.op_type, v)}" for g in _graphs(model.graph)
                          for n in g.node if n.domain in ("", "ai.onnx")
                          and _since(n.op_type, v) != _since(n.op_type, MIN_OPSET)})
            if old:
                raise UnsupportedOpError(
                    f"the model imports opset {v} of the default ONNX domain, where "
                    f"{', '.join(old)} are older definitions than the importer follows "
                    f"(opset {MIN_OPSET} on: legacy attributes such as consumed_inputs were "
                    "dropped); convert the model with onnx.version_converter")


def _since(op_type: str, opset: int) -> int | None:
    """The version of ``op_type``'s definition in force at ``opset`` (None: none yet)."""
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except onnx.defs.SchemaError:
        return None


def _graphs(graph):
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _graphs(g)


def stored_tensors(model: onnx.ModelProto):
    """Every TensorProto the model stores: initialisers and tensor attributes (Constant's
    ``value``, ConstantOfShape's ``value``...), in subgraphs too."""
    for g in _graphs(model.graph):
        yield from g.initializer
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    yield a.t
                elif a.type == onnx.AttributeProto.TENSORS:
                    yield from a.tensors


def _elements(t) -> int:
    if any(d < 0 for d in t.dims):
        raise ModelFormatError(f"tensor {t.name!r} has negative dims {list(t.dims)}")
    return math.prod(int(d) for d in t.dims)


def _itemsize(data_type) -> int | None:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return None


def tensor_bytes(t) -> int | None:
    """The bytes ``t``'s dims and type call for (None for strings and sub-byte types)."""
    size = _itemsize(t.data_type)
    if size is None or t.data_type == TensorProto.STRING or t.data_type in _SUB_BYTE:
        return None
    return _elements(t) * size


_SUB_BYTE = {getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
             if hasattr(TensorProto, n)}


def check_tensor(t) -> None:
    """``t``'s stored data agrees with its dims and type, and is not too large."""
    need = tensor_bytes(t)
    if need is not None and need > MAX_TENSOR_BYTES:
        raise ModelFormatError(f"tensor {t.name!r} of dims {list(t.dims)} needs {need} bytes, "
                               f"more than the {MAX_TENSOR_BYTES} a model may store")
    if t.data_location == TensorProto.EXTERNAL or need is None:
        return
    if t.HasField("raw_data"):
        if len(t.raw_data) != need:
            raise ModelFormatError(f"tensor {t.name!r}: raw_data holds {len(t.raw_data)} bytes"
                                   f", its dims {list(t.dims)} and type need {need}")
        return
    field, per = _FIELDS.get(t.data_type, (None, 1))
    if field is not None:
        have, want = len(getattr(t, field)), _elements(t) * per
        if have != want:
            raise ModelFormatError(f"tensor {t.name!r}: {field} holds {have} values, its "
                                   f"dims {list(t.dims)} need {want}")


def load_external_data(model: onnx.ModelProto, base_dir: str | None) -> None:
    """Read every external tensor's bytes into the model, from files inside ``base_dir``
    (the model's folder) only; refuse external data when the model did not come from a
    path. Each location, file and byte range is checked before anything is read."""
    for t in stored_tensors(model):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        where = f"tensor {t.name!r} keeps its data in the external file {loc!r}"
        if base_dir is None:
            raise ModelFormatError(f"{where}; load the model from its path, so that the file "
                                   "is looked for in the model's folder")
        if not loc or os.path.isabs(loc) or os.path.splitdrive(loc)[0]:
            raise ModelFormatError(f"{where}: the location must be a relative path inside "
                                   "the model's folder")
        root = os.path.realpath(base_dir)
        path = os.path.realpath(os.path.join(root, loc))
        if os.path.commonpath([root, path]) != root:
            raise ModelFormatError(f"{where}, which points outside the model's folder")
        if not os.path.isfile(path):
            raise ModelFormatError(f"{where}, which is not a file in the model's folder")
        need = tensor_bytes(t)
        if need is None:
            raise ModelFormatError(f"{where}: external data of this type is not supported")
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", need))
        except ValueError:
            raise ModelFormatError(f"{where}: offset and length must be integers") from None
        size = os.path.getsize(path)
        if length != need or offset < 0 or offset + need > size:
            raise ModelFormatError(
                f"{where}: its dims {list(t.dims)} need {need} bytes at offset {offset}, "
                f"the entry gives length {length} and the file holds {size} bytes")
        with open(path, "rb") as f:
            f.seek(offset)
            t.raw_data = f.read(need)
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT


def check_stored_tensors(model: onnx.ModelProto) -> None:
    for t in stored_tensors(model):
        check_tensor(t)


# ---------------------------------------------------------------------- made while importing
def check_size(shape, dtype, where: str) -> None:
    """Refuse a tensor of ``shape`` and ``dtype`` larger than MAX_TENSOR_BYTES."""
    n = math.prod(int(s) for s in shape)
    nbytes = n * np.dtype(dtype).itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise ModelFormatError(f"{where} would make a tensor of shape {tuple(shape)} "
                               f"({n} elements, {nbytes} bytes), more than the "
                               f"{MAX_TENSOR_BYTES} bytes the importer allows")


def predicted_shape(node) -> tuple | None:
    """The output shape of a node whose output size is given by values (a NodeView with
    ``const``/``shape``), or None when it is not such a node or the values are unknown."""
    op = node.op_type
    try:
        if op == "ConstantOfShape":
            return tuple(int(s) for s in np.ravel(node.const(0)))
        if op == "Expand":
            return tuple(np.broadcast_shapes(node.shape(0),
                                             tuple(int(s) for s in np.ravel(node.const(1)))))
        if op == "Tile":
            reps = [int(r) for r in np.ravel(node.const(1))]
            return tuple(s * r for s, r in zip(node.shape(0), reps))
        if op == "Range":
            start, limit, delta = (float(np.ravel(node.const(i))[0]) for i in range(3))
            return (max(int(math.ceil((limit - start) / delta)), 0),) if delta else None
        if op == "Pad":
            pads = node.const(1) if node.has(1) else node.attr("pads")
            x = node.shape(0)
            pads = [int(p) for p in np.ravel(pads)]
            if len(pads) != 2 * len(x):
                return None
            return tuple(s + pads[i] + pads[i + len(x)] for i, s in enumerate(x))
        if op in ("Resize", "Upsample"):
            x = node.shape(0)
            sizes = node.const(3) if op == "Resize" and node.has(3) else None
            if sizes is not None and np.size(sizes):
                return tuple(int(s) for s in np.ravel(sizes))
            scales = (node.const(2) if op == "Resize" else
                      node.const(1) if node.has(1) else node.attr("scales"))
            if scales is None or not np.size(scales) or np.size(scales) != len(x):
                return None
            return tuple(int(s * f) for s, f in zip(x, np.ravel(scales)))
    except (ValueError, TypeError, IndexError, OverflowError, KeyError):
        return None  # malformed, or a value known only at run time (NeedsValue)
    return None


def _out_dtype(node):
    if node.op_type == "ConstantOfShape":
        value = node.attr("value")
        return np.float32 if value is None else helper.tensor_dtype_to_np_dtype(value.data_type)
    if node.op_type == "Range":
        return np.int64
    try:
        return node.dtype(0)
    except (ValueError, TypeError, KeyError, AttributeError):
        return np.float32


def check_node_output(node) -> None:
    """Refuse a node that would make an oversized tensor, before it runs or is imported."""
    shape = predicted_shape(node)
    if shape is not None:
        check_size(shape, _out_dtype(node), f"ONNX node {node.name!r} ({node.op_type})")
