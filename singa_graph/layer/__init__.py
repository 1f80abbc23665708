"""SINGA 3.x's ``layer`` module: layers that own parameters and call ops.

A :class:`Layer` creates its parameters the first time it is called (``initialize``), from
the shape of its input, which may be a symbolic :class:`~singa_graph.ir.tensor.Placeholder`:
initialisation happens while the graph is built, before any data exists. Parameters are
:class:`~singa_graph.ir.tensor.Parameter` s holding data; buffers (BatchNorm running stats)
are concrete Tensors with ``requires_grad=False``.

Sub-layers and parameters are found through attributes, also inside lists, tuples and dicts,
and are named hierarchically: ``block1.conv.W``, ``block1.layers.2.scale``::

    class Block(layer.Layer):
        def __init__(self):
            super().__init__()
            self.conv = layer.Conv2d(16, 3, padding=1)
            self.bn = layer.BatchNorm2d()
        def forward(self, x):
            return autograd.relu(self.bn(self.conv(x)))

The SINGA 2.x constructor forms (``Linear(in, out)``, ``Conv2d(in, out, k, stride,
padding)``, ``BatchNorm2d(c)``, ``SeparableConv2d(in, out, k, ...)``) work as well;
:mod:`singa_graph.autograd` re-exports these classes under its names. Train/eval behaviour
(BatchNorm, Dropout) follows ``autograd.training`` at call time.

The layers live in one module per family (dense, conv, norm, pool, recurrent, activation,
loss, shape, transformer); this package re-exports them under SINGA's names. Layers call
the functional ops of :mod:`singa_graph.functional`, which sits below them.
"""
from .activation import LeakyReLU, ReLU, Sigmoid, SoftMax, Tanh
from .base import Layer
from .conv import Conv2d, SeparableConv2d
from .dense import Embedding, Gemm, Linear
from .loss import BinaryCrossEntropy, CrossEntropy, MeanSquareError, SoftMaxCrossEntropy
from .norm import BatchNorm2d, Dropout
from .pool import AvgPool1d, AvgPool2d, GlobalAvgPool2d, MaxPool1d, MaxPool2d, Pooling2d
from .recurrent import LSTM, RNN, RNN_Base
from .shape import Add, Cat, Flatten, Reshape
from .transformer import (GELU, LayerNorm, MultiHeadAttention, PositionEmbedding,
                          TransformerBlock)

__all__ = ["Layer", "Linear", "Conv2d", "SeparableConv2d", "BatchNorm2d", "Pooling2d",
           "MaxPool2d", "AvgPool2d", "MaxPool1d", "AvgPool1d", "GlobalAvgPool2d", "ReLU",
           "LeakyReLU", "Sigmoid", "Tanh", "SoftMax", "Flatten", "Reshape", "Dropout", "Cat",
           "Add", "SoftMaxCrossEntropy", "MeanSquareError", "CrossEntropy", "Gemm", "Embedding",
           "RNN_Base", "RNN", "LSTM", "BinaryCrossEntropy", "LayerNorm", "GELU",
           "MultiHeadAttention", "PositionEmbedding", "TransformerBlock"]
