"""ONNX import and export.

    from singa_graph import onnx as sonnx_io
    proto = sonnx_io.export(model, "model.onnx", dynamic_batch=True)
    m = sonnx_io.load("model.onnx")          # a trainable Model
    m(x)                                     # eval mode: runs a compiled plan

The op mapping lives in :mod:`.registry` (tables), the ``import_*`` modules (ONNX -> ours,
one per op family), the ``export_*`` modules (ours -> ONNX) and :mod:`.pending` (ONNX ops
that wait for the op library).
"""
from ..errors import ModelFormatError, UnsupportedOpError
from .exporter import export
from .imported import ONNXModel, load
from .program import Program, read_model
from .registry import supported_import_ops

__all__ = ["export", "load", "ONNXModel", "Program", "read_model", "supported_import_ops",
           "UnsupportedOpError", "ModelFormatError"]
