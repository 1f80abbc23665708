"""ONNX's own backend tests (onnx.backend.test.BackendTest) run through SingaBackend.

Node tests, the PyTorch-converted and PyTorch-operator models and the simple models run on
the CPU. A case whose model uses an op type that the importer does not have at all is
skipped with the reason "waits for the op library" (see singa_graph/onnx/pending.py);
every other case must pass, or be listed in EXCLUDED below with the reason next to it.
"""
from __future__ import annotations

import unittest
import warnings

import onnx.backend.test

from singa_graph.errors import UnsupportedOpError
from singa_graph.onnx.backend import SingaBackend, SingaRep
from singa_graph.onnx.program import Program, read_model


class _Backend(SingaBackend):
    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        model = read_model(model)
        try:
            program = Program(model)
        except UnsupportedOpError:
            # one reason for all, so pytest's summary groups them into one line; the error
            # names the op types each case lacks (singa_graph/onnx/pending.py lists the
            # ones the op library should gain first)
            raise unittest.SkipTest("waits for the op library (an ONNX op type without an "
                                    "importer)") from None
        return SingaRep(program, device)


# pattern -> why the case cannot pass with today's op library and importer
EXCLUDED = {
    r"_(u?int8|u?int16|uint32|uint64)_": "the op library has no 8/16-bit or unsigned ints",
    r"BFLOAT16|bfloat16|_bf16|FLOAT8|FLOAT4|INT4|INT2|E8M0":
        "the op library has no bfloat16, float8, float4, int4 or int2 dtype",
    r"^test_equal_string": "the op library has no string dtype",
    r"^test_(averagepool|maxpool)_2d_dilations|^test_MaxPool[12]d_stride_padding_dilation":
        "dilated pooling is not in the op library",
    r"^test_(averagepool|maxpool)_3d_|^test_(Conv3d|AvgPool3d|MaxPool3d)|^test_convtranspose_3d":
        "3-d convolution and pooling are not in the op library",
    r"^test_batchnorm_.*training_mode": "training-mode BatchNormalization returning the "
                                        "running statistics as outputs",
    r"^test_div_int32_trunc|^test_center_crop_pad_.*_expanded":
        "integer Div: the op library divides floats only",
    r"^test_loop16_seq_none": "onnx's runner cannot compare a sequence holding a 0-d tensor "
                              "(it calls len() on it); tests/onnx/test_control_flow.py checks "
                              "this model against onnx.reference",
    r"^test_maxpool_with_argmax": "MaxPool's Indices output",
    r"^test_reshape_allowzero": "Reshape allowzero=1 with a 0 in the shape",
    r"^test_scatter_elements_with_(duplicate_indices|reduction)":
        "ScatterElements reduction add/mul/max/min: the op library's scatter only writes",
    r"^test_training_dropout_(default|mask|default_mask)?_cpu$|^test_training_dropout_cpu$":
        "training-mode Dropout draws other random masks than the reference",
    r"^test_resize_(downsample|tf_crop|upsample_scales_(cubic|linear)|upsample_sizes_)":
        "Resize other than nearest upsampling by whole factors (linear, cubic, downsampling, "
        "fractional sizes, crop-and-resize): the op library's upsample is nearest, whole "
        "factors",
    r"^test_swiglu_float16": "the Sigmoid kernel has no float16 form",
    r"^test_celu_float16": "the Elu kernel has no float16 form",
    r"^test_attention_.*(fp16|float16).*_expanded": "the Softmax kernel has no float16 form",
    r"^test_real_|^OnnxBackendRealModelTest": "real models are downloaded; no network in CI",
}

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the generators warn about float overflow in casts
    backend_test = onnx.backend.test.BackendTest(_Backend, __name__)
for pattern, reason in EXCLUDED.items():
    backend_test.exclude(pattern)

_cases = backend_test.test_cases
OnnxBackendNodeModelTest = _cases["OnnxBackendNodeModelTest"]
OnnxBackendPyTorchConvertedModelTest = _cases["OnnxBackendPyTorchConvertedModelTest"]
OnnxBackendPyTorchOperatorModelTest = _cases["OnnxBackendPyTorchOperatorModelTest"]
OnnxBackendSimpleModelTest = _cases["OnnxBackendSimpleModelTest"]

# CUDA variants: the backend runs on the CPU only; drop them instead of listing skips
for _cls in (OnnxBackendNodeModelTest, OnnxBackendPyTorchConvertedModelTest,
             OnnxBackendPyTorchOperatorModelTest, OnnxBackendSimpleModelTest):
    for _name in [n for n in vars(_cls) if n.endswith("_cuda")]:
        delattr(_cls, _name)
