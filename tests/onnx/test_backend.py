"""ONNX's own backend tests (onnx.backend.test.BackendTest) run through SingaBackend.

Node tests, the PyTorch-converted and PyTorch-operator models and the simple models run on
the CPU. A case that meets an op type or a dtype the library does not have is skipped with
the UnsupportedOpError or DTypeError that names it (whether the importer refuses the model
or a node refuses a dtype while tracing); every other case must pass, or be listed in
EXCLUDED below with the reason next to it. The terminal summary prints how many of ONNX's
CPU node tests pass (``bench/onnx_node_coverage.py`` groups the rest by reason).
"""
from __future__ import annotations

import fcntl
import os
import pickle
import unittest
import warnings
from pathlib import Path

import numpy as np
import onnx.backend.test
import onnx.backend.test.runner

from singa_graph.errors import DTypeError, UnsupportedOpError
from singa_graph.onnx.backend import SingaBackend, SingaRep
from singa_graph.onnx.program import Program, read_model


def _skip(e):
    # the first line names the op or dtype; pytest's summary groups equal reasons
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return unittest.SkipTest(f"{type(e).__name__}: {first}")


class _Rep(SingaRep):
    def run(self, inputs, **kwargs):
        try:
            return super().run(inputs, **kwargs)
        except (UnsupportedOpError, DTypeError) as e:
            raise _skip(e) from None


class _Backend(SingaBackend):
    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        try:
            return _Rep(Program(read_model(model)), device)
        except (UnsupportedOpError, DTypeError) as e:
            raise _skip(e) from None


# pattern -> why the case cannot pass in a CPU float32/float64 framework
EXCLUDED = {
    r"^test_equal_string|^test_string_|^test_strnorm|^test_regex_|^test_image_decoder":
        "string tensors and image decoding",
    r"^test_loop16_seq_none": "onnx's runner cannot compare a sequence holding a 0-d tensor "
                              "(it calls len() on it); tests/onnx/test_control_flow.py checks "
                              "this model against onnx.reference",
    r"^test_training_dropout_(default|mask|default_mask)?_cpu$|^test_training_dropout_cpu$":
        "training-mode Dropout draws other random masks than the reference",
    r"^test_dft_inverse(_opset19)?_cpu$":
        "the expected values carry float32 FFT rounding (1e-6 where the exact result is 0, "
        "above the test's atol of 1e-7); ours are computed in float64",
    r"^test_attention_4d_causal_fp16_expanded_cpu$":
        "the float16 roundings of its intermediate results differ from the reference's by "
        "0.12% (the test allows 0.1%)",
    r"^test_real_|^OnnxBackendRealModelTest": "real models are downloaded; no network in CI",
}


def _node_cases_once(load):
    """``load_model_tests`` with its node cases kept in test-artifacts/: onnx builds them by
    running every case generator (its reference ops included), 12 s on each collection, in
    each pytest-xdist worker. The file is keyed by the onnx and numpy versions; a lock lets
    one process build it while the others wait and read."""
    root = Path(__file__).resolve().parents[2] / "test-artifacts"
    path = root / f"onnx-node-cases-{onnx.__version__}-numpy-{np.__version__}.pickle"

    def cached(*args, kind=None, **kwargs):
        if kind != "node" or args or kwargs:
            return load(*args, kind=kind, **kwargs)
        root.mkdir(exist_ok=True)
        with open(root / "onnx-node-cases.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(path, "rb") as f:
                    return pickle.load(f)
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
                cases = load(kind="node")
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                with open(tmp, "wb") as f:
                    pickle.dump(cases, f, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp, path)
                return cases
    return cached


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the generators warn about float overflow in casts
    _runner = onnx.backend.test.runner
    _load = _runner.load_model_tests
    _runner.load_model_tests = _node_cases_once(_load)
    try:
        backend_test = onnx.backend.test.BackendTest(_Backend, __name__)
    finally:
        _runner.load_model_tests = _load
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
