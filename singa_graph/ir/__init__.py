"""The IR: tensors, nodes, graphs and the Operation base. Nothing here computes numbers."""
from .dtypes import as_dtype, float16, float32, float64, int32, int64
from .graph import Graph
from .node import Node
from .op import OPS, Operation, building, is_building, no_grad, not_building, op_class
from .tensor import Parameter, Placeholder, PlaceHolder, Tensor, TensorSpec

__all__ = ["Tensor", "Placeholder", "PlaceHolder", "Parameter", "TensorSpec", "Node", "Graph",
           "Operation", "OPS", "op_class", "no_grad", "building", "not_building", "is_building", "as_dtype",
           "float16", "float32", "float64", "int32", "int64"]
