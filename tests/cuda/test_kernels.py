"""Every CUDA kernel computes what its CPU kernel computes (within float32 tolerance), and
every op with a CPU kernel has a CUDA kernel and at least one case here."""
import importlib
import pkgutil
import os

import pytest

from singa_graph.runtime import registry

from harness import check

_HERE = os.path.dirname(__file__)
MODULES = sorted(name for _, name, _ in pkgutil.iter_modules([_HERE])
                 if name.startswith("cases_"))
CASES = [c for mod in MODULES for c in importlib.import_module(mod).CASES]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_kernel_matches_cpu(case, gpu):
    check(case, gpu)


# Ops that run on the CPU only (imported inference graphs: quantisation, N-d pooling and
# convolution, resampling, value-dependent and sorting ops); on a CUDA device they raise
# UnsupportedOpError naming the op.
CPU_ONLY = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
            "QLinearMatMul", "ConvInteger", "QLinearConv", "Resize", "AxisMatmul", "PoolNd",
            "Col2Im", "ConvNd", "ConvTransposeNd", "GridSample", "RoiAlign", "GatherND",
            "ScatterND", "TopK", "CumProd", "ReverseSequence", "Unique",
            "NonMaxSuppression", "BitCast", "Det", "DeformConv", "TfIdfVectorizer",
            "TreeEnsemble",
            # control flow: a GPU plan refuses it by name (tests/cuda/test_control_flow_cuda.py)
            "If", "Loop", "Scan",
            # made only by passes of CPU inference plans (passes/layout.py, direct.py)
            "Conv2dNHWC", "Conv2dDirect", "Conv2dDirectNHWC", "MaxPool2dNHWC", "MatMulDirect"}


def test_every_cpu_kernel_has_a_cuda_kernel_and_a_case(gpu):
    registry._load("cpu")
    registry._load("cuda")
    cpu = {t for t, d in registry.KERNELS if d == "cpu"} - CPU_ONLY
    cuda = {t for t, d in registry.KERNELS if d == "cuda"}
    assert not cpu - cuda, f"ops without a CUDA kernel: {sorted(cpu - cuda)}"
    tested = {c.op.type for c in CASES}
    assert not cpu - tested, f"CUDA kernels without a case: {sorted(cpu - tested)}"


@pytest.mark.parametrize("op_type", sorted(CPU_ONLY))
def test_cpu_only_ops_are_refused_on_cuda_by_name(op_type, gpu):
    from singa_graph.errors import UnsupportedOpError

    registry._load("cuda")
    assert (op_type, "cuda") not in registry.KERNELS
    with pytest.raises(UnsupportedOpError, match=op_type):
        registry.get_kernel(op_type, "cuda")
