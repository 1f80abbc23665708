"""An imported ONNX model as a trainable singa_graph :class:`~singa_graph.model.Model`."""
from __future__ import annotations

import numpy as np

from .. import autograd, layer
from ..errors import GraphError
from ..ir.tensor import Parameter, Tensor
from ..zoo import _Classifier
from . import (import_activation, import_attention, import_by_value,  # noqa: F401
               import_compose, import_index, import_index_nd, import_integer, import_logic,
               import_loss, import_math, import_nn, import_norm, import_pool, import_quant,
               import_rnn, import_shape, import_signal, import_training,
               import_transformer)  # (fill the tables)
from .program import Program
from . import import_control, import_sequence  # noqa: F401,E402  (If/Loop/Scan, sequences)


class Initializers(layer.Layer):
    """Holds the imported initialisers: float ones used as tensors become Parameters,
    BatchNorm statistics buffers. They keep their ONNX names, whatever characters those
    hold, so they are kept in a dict rather than as attributes."""

    def __init__(self, device=None):
        super().__init__()
        object.__setattr__(self, "_device", device)
        object.__setattr__(self, "_tensors", {})
        object.__setattr__(self, "_buffer_names", set())

    def _prefix(self) -> str:
        return ""

    def _own(self, buffers: bool):
        for name, t in self._tensors.items():
            if (name in self._buffer_names) == buffers:
                yield name, t

    def parameter(self, name, arr) -> Tensor:
        t = self._tensors.get(name)
        if t is None:
            t = self._tensors[name] = Parameter(data=np.array(arr), device=self._device,
                                                name=name)
        return t

    def buffer(self, name, arr) -> Tensor:
        t = self._tensors.get(name)
        if t is None:
            t = self._tensors[name] = Tensor(data=np.array(arr), device=self._device,
                                             requires_grad=False, name=name)
            self._buffer_names.add(name)
        return t


class ONNXModel(_Classifier):
    """A Model whose ``forward`` runs an imported ONNX graph.

    Graph-mode calls trace the ONNX graph on Placeholders and compile a plan per input shape
    (a symbolic batch dimension takes the size of the data fed). The initialisers are
    trainable Parameters named as in the file, so ``train_one_batch`` (softmax cross-entropy
    of the first output against labels) fine-tunes the model; BatchNormalization uses batch
    statistics while training, as a native model does.

    Args:
        onnx_model: a ModelProto, a path or bytes.
        device: where the parameters live (the default device when None).
        last_layers: run only the first ``last_layers`` nodes (negative: drop nodes from the
            end) and return the outputs of the last one: the model without its head.
    """

    def __init__(self, onnx_model, device=None, last_layers=None):
        super().__init__()
        self.program = onnx_model if isinstance(onnx_model, Program) else \
            Program.read(onnx_model)
        self.initializers = Initializers(device)
        self.last_layers = last_layers
        self._device = device

    @property
    def input_names(self) -> list[str]:
        return list(self.program.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.program.outputs)

    def input_shapes(self) -> list[tuple]:
        """Declared input shapes; symbolic dimensions are None."""
        return self.program.input_shapes()

    def example_inputs(self, batch: int = 1) -> list[np.ndarray]:
        """Zero arrays of the declared input shapes, symbolic dimensions set to ``batch``."""
        from onnx import helper

        out = []
        for name, shape in zip(self.program.inputs, self.input_shapes()):
            elem = self.program.input_info[name].type.tensor_type.elem_type
            if shape is None:
                raise GraphError(f"input {name!r} declares no shape; give example inputs")
            out.append(np.zeros(tuple(batch if d is None else d for d in shape),
                                helper.tensor_dtype_to_np_dtype(elem)))
        return out

    def forward(self, *xs, aux_output=(), last_layers=None):
        self.program.check_inputs([tuple(x.shape) for x in xs])
        outs = self.program.trace(
            dict(zip(self.program.inputs, xs)), self.initializers,
            training=bool(autograd.training),
            last_layers=self.last_layers if last_layers is None else last_layers,
            extra_outputs=aux_output)
        outs = [o if isinstance(o, Tensor) else Tensor(data=o, requires_grad=False)
                for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def train_one_batch(self, *xs_and_y):
        """One step on the model's inputs (``input_ids, attention_mask, ...``) and the
        labels last."""
        *xs, y = xs_and_y
        out = self.forward(*xs)
        if isinstance(out, tuple):
            out = out[0]
        loss = self.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def load(path_or_proto, device=None) -> ONNXModel:
    """Import an ONNX model as a trainable :class:`ONNXModel`.

    Raises :class:`~singa_graph.errors.ModelFormatError` for unreadable, truncated or invalid
    files and :class:`~singa_graph.errors.UnsupportedOpError` naming every op type of the
    model that cannot be imported. The model is ready to run in eval mode; call
    ``compile`` first to train it (``set_optimizer`` and ``train()``).
    """
    m = ONNXModel(path_or_proto, device=device)
    m.training = False  # eval mode, without touching the process-wide autograd flag
    return m
