"""SINGA's ``sonnx`` names over :mod:`singa_graph.onnx`, so SINGA code ports::

    from singa_graph import sonnx
    proto = sonnx.to_onnx([x], [y], model_name="mlp")     # tensors traced by autograd
    rep = sonnx.prepare(proto, device="CPU")
    outputs = rep.run([x_numpy])

    class MyModel(sonnx.SONNXModel):                     # transfer learning
        def __init__(self, onnx_model):
            super().__init__(onnx_model, last_layers=-1)  # drop the last node (the head)
            self.linear = layer.Linear(10)

        def forward(self, x):
            return self.linear(super().forward(x))
"""
from __future__ import annotations

import onnx

from .ir.graph import Graph
from .onnx.backend import SingaBackend, SingaRep
from .onnx.exporter import export as _export
from .onnx.imported import ONNXModel

__all__ = ["to_onnx", "prepare", "run_model", "run_node", "SingaBackend", "SingaRep",
           "SONNXModel", "save", "load"]


def to_onnx(inputs, outputs, model_name: str = "sonnx", opset=None, input_names=None,
            output_names=None, dynamic_batch: bool = False) -> onnx.ModelProto:
    """The ONNX model computing ``outputs`` from ``inputs``.

    ``outputs`` are tensors produced by ops on ``inputs`` (Placeholders in graph mode, or
    eager tensors that recorded their ops, as in SINGA); several outputs are allowed.
    """
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    graph = Graph(outputs, inputs=inputs, name=model_name)
    return _export(graph, opset=opset, input_names=input_names, output_names=output_names,
                   dynamic_batch=dynamic_batch)


class SONNXModel(ONNXModel):
    """SINGA's ``SONNXModel``: a trainable Model running an imported ONNX graph.

    ``forward(*x, aux_output=(), last_layers=None)`` returns the graph outputs, followed by
    the values named in ``aux_output``; ``last_layers`` (here or in the constructor) keeps
    only that many nodes, to cut off the head for transfer learning.
    """

    def __init__(self, onnx_model, device=None, last_layers=None):
        super().__init__(onnx_model, device=device, last_layers=last_layers)


prepare = SingaBackend.prepare
run_model = SingaBackend.run_model
run_node = SingaBackend.run_node
save = onnx.save
load = onnx.load
