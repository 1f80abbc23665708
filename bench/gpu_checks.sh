#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, in one run: the CUDA test suite on the device
# (not the simulator) and bench/cuda_step.py against PyTorch CUDA. Results go to $OUT
# (default test-artifacts/gpu): cuda-tests.log, cuda-tests.xml, cuda-step.log.
#
#     bash bench/gpu_checks.sh [PYTHON]        # PYTHON defaults to python3
#
# TEST_WORKERS (default 8) pytest-xdist processes share the GPU; TEST_BUDGET and
# BENCH_BUDGET (seconds) bound the two parts so that the whole run ends in a known time.
set -u
PY=${1:-python3}
OUT=${OUT:-test-artifacts/gpu}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
unset NUMBA_ENABLE_CUDASIM
nvidia-smi -L || true
$PY - <<'PY'
import numba, numpy, sys
from numba import cuda
print("python", sys.version.split()[0], "numba", numba.__version__, "numpy", numpy.__version__)
try:
    import numba_cuda; print("numba-cuda", numba_cuda.__version__)
except ImportError as e: print("numba-cuda:", e)
try:
    import cupy; print("cupy", cupy.__version__)
except ImportError as e: print("cupy:", e)
print("cuda available:", cuda.is_available())
if cuda.is_available():
    d = cuda.get_current_device(); print("device:", d.name, "cc", d.compute_capability)
PY
opts=""
$PY -c "import xdist" 2>/dev/null && opts="-n ${TEST_WORKERS:-8}"
$PY -c "import pytest_timeout" 2>/dev/null && opts="$opts --timeout 90"
timeout "${TEST_BUDGET:-270}" $PY -m pytest tests/cuda -q $opts -p no:cacheprovider \
    --tb=short --junitxml="$OUT/cuda-tests.xml" -rfE 2>&1 | tee "$OUT/cuda-tests.log" | tail -60
echo "tests exit: ${PIPESTATUS[0]}"
timeout "${BENCH_BUDGET:-150}" $PY bench/cuda_step.py --models "${BENCH_MODELS:-resnet}" --rounds "${BENCH_ROUNDS:-2}" \
    --steps "${BENCH_STEPS:-20}" 2>&1 | tee "$OUT/cuda-step.log" | tail -40
echo "bench exit: ${PIPESTATUS[0]}"
