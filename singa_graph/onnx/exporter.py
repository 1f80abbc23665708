"""Export a Model or a Graph to ONNX: the inference graph, checked by onnx's full checker."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import GraphError, UnsupportedOpError
from ..ir.graph import Graph
from ..ir.op import building
from ..ir.tensor import Placeholder, Tensor
from . import (export_elementwise, export_layout, export_ops,  # noqa: F401  (fill the table)
               export_transformer)
from .registry import EXPORTERS

DEFAULT_OPSET = 17
MAX_IR_VERSION = 13  # what onnxruntime accepts


class ExportContext:
    """Names and nodes of the ONNX graph being written; export functions call :meth:`emit`."""

    def __init__(self, opset, dynamic_batch, batch, state_names):
        self.opset, self.dynamic_batch, self.batch = opset, dynamic_batch, batch
        self.nodes, self.initializers, self._names = [], [], {}
        self._state = state_names  # id(tensor) -> name, for parameters and buffers
        self._used: set[str] = set()
        self._ids = itertools.count()
        self.read: set[int] = set()  # ids of the tensors some node or graph output reads

    def is_read(self, t: Tensor) -> bool:
        """Whether the exported graph reads ``t`` (an op may leave unread outputs out)."""
        return id(t) in self.read

    def unique(self, base: str) -> str:
        name = base
        while name in self._used:
            name = f"{base}_{next(self._ids)}"
        self._used.add(name)
        return name

    def set_name(self, t: Tensor, name: str) -> None:
        self._names[id(t)] = name
        self._used.add(name)

    def name(self, t) -> str:
        """The ONNX name of ``t``; leaves with data become initialisers (parameters and
        states, under their names) or Constant nodes."""
        if isinstance(t, str):
            return t
        if id(t) in self._names:
            return self._names[id(t)]
        if t.creator is None and t.data is not None:
            state = self._state.get(id(t))
            if state is not None or t.stores_grad:
                name = self.unique(state or t.name)
                self.initializers.append(numpy_helper.from_array(np.asarray(t.data), name))
            else:
                name = self.const(np.asarray(t.data), t.name)
            self._names[id(t)] = name
            return name
        if t.creator is None:
            raise GraphError(f"tensor {t.name!r} is read by the graph but is neither an input "
                             "nor data")
        name = self.unique(t.name)
        self._names[id(t)] = name
        return name

    def fresh(self, like) -> str:
        """A new intermediate name."""
        base = like if isinstance(like, str) else like.name
        return self.unique(f"{base}_tmp")

    def alias(self, t: Tensor, source) -> None:
        """``t`` is ``source`` in the ONNX graph (an omitted op)."""
        self._names[id(t)] = self.name(source)

    def const(self, arr: np.ndarray, base: str = "const") -> str:
        name = self.unique(base)
        self.nodes.append(helper.make_node("Constant", [], [name], name=self.unique(
            f"{name}_node"), value=numpy_helper.from_array(np.asarray(arr), name)))
        return name

    def emit(self, op_type: str, inputs, outputs, **attrs) -> None:
        ins = [self.name(x) for x in inputs]
        outs = [self.name(y) for y in outputs]
        self.nodes.append(helper.make_node(op_type, ins, outs,
                                           name=self.unique(f"{op_type}_{len(self.nodes)}"),
                                           **attrs))


def _value_info(name, t: Tensor, dynamic: bool):
    shape = list(t.shape)
    if dynamic and shape:
        shape[0] = "N"
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), shape)


def trace_model(model, inputs=None):
    """``(graph, input placeholders, state names)`` of ``model.forward`` in eval mode."""
    from .. import autograd

    specs = inputs if inputs is not None else getattr(model, "_onnx_inputs", None)
    if specs is None and hasattr(model, "example_inputs"):
        specs = model.example_inputs()
    if specs is None:
        raise GraphError("export needs the input shapes: call model.compile([x]) first or "
                         "pass inputs=[x, ...] (arrays, Tensors or Placeholders)")
    phs = []
    for i, x in enumerate(specs):
        if isinstance(x, Placeholder):
            phs.append(x)
        else:
            a = x if isinstance(x, Tensor) else np.asarray(x)
            dt = np.float32 if a.dtype == np.float64 else a.dtype
            phs.append(Placeholder(a.shape, dt, name=f"input{i}" if len(specs) > 1 else "input"))
    was_model, was_global = model.training, autograd.training
    model.training, autograd.training = False, False
    try:
        with building():
            outs = model.forward(*phs)
    finally:
        model.training, autograd.training = was_model, was_global
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    states = {id(t): name for name, t in model.get_states().items()}
    return Graph(outs, inputs=phs, name=type(model).__name__), phs, states


def export(model_or_graph, path=None, opset=None, input_names=None, output_names=None,
           dynamic_batch=False, inputs=None) -> onnx.ModelProto:
    """Export the inference graph of a Model (or a Graph) to ONNX.

    BatchNorm is written in its eval form (ONNX momentum = 1 - ours), Dropout is left out,
    every output of ``forward`` becomes a graph output, and the initialisers carry the
    parameter and state names. ``dynamic_batch`` makes dimension 0 of the inputs and outputs
    the symbolic ``N``. ``inputs`` gives example inputs when the model was never compiled.
    The result passes ``onnx.checker.check_model(full_check=True)``; with ``path`` it is also
    saved there.
    """
    opset = DEFAULT_OPSET if opset is None else int(opset)
    newest = onnx.defs.onnx_opset_version()
    if not 17 <= opset <= newest:
        raise ValueError(f"opset must lie in 17..{newest}, got {opset}")
    if isinstance(model_or_graph, Graph):
        graph, phs, states = model_or_graph, list(model_or_graph.inputs), {}
        name = graph.name
    else:
        graph, phs, states = trace_model(model_or_graph, inputs)
        name = type(model_or_graph).__name__
    return _write(graph, phs, states, name, path, opset, input_names, output_names,
                  dynamic_batch)


def _write(graph, phs, states, name, path, opset, input_names, output_names, dynamic_batch):
    outs = list(graph.outputs)
    input_names = list(input_names) if input_names else [t.name for t in phs]
    output_names = list(output_names) if output_names else [f"output{i}" if len(outs) > 1
                                                          else "output" for i in
                                                          range(len(outs))]
    if len(input_names) != len(phs) or len(output_names) != len(outs):
        raise ValueError(f"the graph has {len(phs)} input(s) and {len(outs)} output(s); got "
                         f"{len(input_names)} input and {len(output_names)} output names")
    batch = phs[0].shape[0] if phs and phs[0].shape else None
    ctx = ExportContext(opset, dynamic_batch, batch, states)
    for t, n in zip(phs, input_names):
        ctx.set_name(t, n)
    ctx.read = {id(t) for n in graph.nodes for t in n.inputs} | {id(t) for t in outs}
    unsupported = sorted({n.type for n in graph.nodes if n.type not in EXPORTERS})
    if unsupported:
        raise UnsupportedOpError(f"cannot export op type(s) {', '.join(unsupported)} to ONNX "
                                 "(export writes the inference graph; losses and gradient "
                                 "ops have no ONNX form here)")
    out_ids = {id(t): n for t, n in zip(outs, output_names)}
    for node in graph.nodes:
        for o in node.outputs:
            if id(o) in out_ids and id(o) not in ctx._names:
                ctx.set_name(o, out_ids[id(o)])
        EXPORTERS[node.type](ctx, node)
    for t, n in zip(outs, output_names):  # outputs that an omitted op made an alias
        if ctx.name(t) != n:
            ctx.emit("Identity", [ctx.name(t)], [n])
    g = helper.make_graph(ctx.nodes, name,
                          [_value_info(n, t, dynamic_batch) for t, n in zip(phs, input_names)],
                          [_value_info(n, t, dynamic_batch) for t, n in zip(outs, output_names)],
                          ctx.initializers)
    ops = [helper.make_opsetid("", opset)]
    model = helper.make_model(g, opset_imports=ops, producer_name="singa_graph",
                              ir_version=min(MAX_IR_VERSION, max(
                                  8, helper.find_min_ir_version_for(ops))))
    onnx.checker.check_model(model, full_check=True)
    if path is not None:
        onnx.save(model, str(path))
    return model
