"""singa_graph -> ONNX: LayerNorm as LayerNormalization (opset 17 on), so a model whose
LayerNormalization was imported as the fused op exports again."""
from __future__ import annotations

from .registry import exporter


@exporter("LayerNorm")
def layer_norm(ctx, node):
    """The normalised output only: the saved mean and reciprocal deviation feed the backward,
    which the inference graph does not have (ONNX's would keep the reduced axes)."""
    op = node.op
    ctx.emit("LayerNormalization", node.inputs, node.outputs[:1], axis=op.axis,
             epsilon=op.eps)
