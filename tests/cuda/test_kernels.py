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


def test_every_cpu_kernel_has_a_cuda_kernel_and_a_case(gpu):
    registry._load("cpu")
    registry._load("cuda")
    cpu = {t for t, d in registry.KERNELS if d == "cpu"}
    cuda = {t for t, d in registry.KERNELS if d == "cuda"}
    assert not cpu - cuda, f"ops without a CUDA kernel: {sorted(cpu - cuda)}"
    tested = {c.op.type for c in CASES}
    assert not cpu - tested, f"CUDA kernels without a case: {sorted(cpu - tested)}"
