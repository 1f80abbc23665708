# `make demo` and `make test` work on a fresh machine: they create .venv and install first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-test

# Programs some tests and pictures use: Graphviz's dot (svg/png graphs), rsvg-convert
# (memory.png) and headless Chromium (the HTML test). `make test` installs them with apt-get
# when it runs as root on a system that has it; elsewhere the tests that need them are
# skipped and say why.
TOOLS_APT := graphviz librsvg2-bin chromium

.PHONY: install tools torch test demo bench pictures clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

tools:
	@if command -v dot >/dev/null && command -v rsvg-convert >/dev/null && \
	    command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing $(TOOLS_APT) with apt-get"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	        --no-install-recommends $(TOOLS_APT)) >/dev/null 2>&1 || \
	    echo "note: could not install $(TOOLS_APT); the tests that need them are skipped"; \
	else \
	    echo "note: $(TOOLS_APT) are not all installed (not root or no apt-get); the tests" \
	         "that need them are skipped"; \
	fi

# PyTorch (a local CPU build, pinned) lets the tests compare with it; best effort.
# torchvision (the ONNX-import tests of its models) goes in with --no-deps: its own
# dependencies would replace the CPU torch with a CUDA one; pillow is what it imports.
TORCHVISION := 'torchvision==0.28.0' 'pillow>=9'
# Hugging Face transformers (tiny BERT/RoBERTa/GPT-2 for the ONNX-import tests) does not
# depend on torch, so it leaves the CPU build in place.
TRANSFORMERS := 'transformers==5.24.0'

torch: install
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q 'torch==2.13.0' || \
	    echo "note: torch==2.13.0 could not be installed; the tests that compare with it are skipped"
	@$(PY) -c "import torchvision" 2>/dev/null || \
	    $(PY) -m pip install -q --no-deps $(TORCHVISION) || \
	    echo "note: torchvision could not be installed; the tests of its models are skipped"
	@$(PY) -c "import transformers" 2>/dev/null || $(PY) -m pip install -q $(TRANSFORMERS) || \
	    echo "note: transformers could not be installed; the tests of its models are skipped"

# The CUDA kernels run on numba's CUDA simulator in a process of their own: the switch must
# be set before numba is first imported. On a machine with a GPU the first run covers them.
# The simulator never compiles a kernel, so that run records every launch's argument types
# and tests/ptx then compiles each one for sm_90 and sm_80 (NVVM from the CUDA toolkit or
# the nvidia-* wheels, no GPU needed; skipped where there is none), in a third process
# because the simulator replaces numba.cuda. The simulator runs kernels in Python threads
# (tests/cuda/conftest.py makes it thread-safe and quick to switch), so it and then
# tests/ptx run beside the CPU suite (their reports printed after), at a lower priority: cold,
# all three compile the same CPU kernels, and the CPU suite is the longest. tests/ptx runs
# its two targets on two workers (xdist groups): it mostly runs once the CPU suite is done
# (the suite alone on the 2-vCPU AMD host: 100-108 -> 78-81 s).
# The CPU suite is mostly Numba compiling, one kernel at a time per process, so it runs on
# two pytest-xdist workers, each taking whole test files (a file's kernels are compiled by
# one worker; all processes share Numba's on-disk cache). Both suites list their slowest
# tests (--durations), first compiles included, so that a slow run can be traced.
# Importing the CPU kernels compiles the BLAS callers for both float types (explicit
# signatures: 23 s with a cold cache). Done once before the suites start, the three
# processes that import them at once load them from the cache instead of each compiling
# them (with a cold cache both xdist workers compiled them, 2 x 23 s of CPU time; the
# simulator suite, started beside them, too).
TEST_WORKERS ?= 2
test: install tools torch
	@mkdir -p test-artifacts
	@rm -f test-artifacts/cuda-simulator.rc test-artifacts/ptx.rc  # no stale pass
	@$(PY) -c "import singa_graph.runtime.kernels.cpu"
	@(NUMBA_ENABLE_CUDASIM=1 nice -n 10 $(PY) -m pytest -q -p no:cacheprovider --durations=10 \
	    tests/cuda > test-artifacts/cuda-simulator.log 2>&1; echo $$? > test-artifacts/cuda-simulator.rc; \
	  nice -n 10 $(PY) -m pytest -q -n 2 --dist loadgroup tests/ptx > test-artifacts/ptx.log 2>&1; \
	  echo $$? > test-artifacts/ptx.rc) & side=$$!; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 --ignore=tests/ptx; \
	    cpu=$$?; \
	wait $$side; \
	echo "== NUMBA_ENABLE_CUDASIM=1 pytest tests/cuda (test-artifacts/cuda-simulator.log)"; \
	cat test-artifacts/cuda-simulator.log; \
	echo "== pytest tests/ptx (test-artifacts/ptx.log)"; \
	cat test-artifacts/ptx.log; \
	test $$cpu -eq 0 && test "$$(cat test-artifacts/cuda-simulator.rc)" = 0 && \
	    test "$$(cat test-artifacts/ptx.rc)" = 0

demo: install
	$(PY) examples/cnn.py --graph --epochs 10

# torch is pinned to a CPU build here; any torch >= 2.0 works for bench/step_time.py
bench: install
	$(PY) -m pip install -q --no-deps $(TORCHVISION)
	$(PY) -m pip install -q 'torch==2.13.0' -e '.[bench]'
	$(PY) bench/memory.py
	$(PY) bench/overhead.py
	$(PY) bench/step_time.py
	$(PY) bench/conv.py
	$(PY) bench/dist.py
	$(PY) bench/onnx_models.py

# the README's pictures of the CNN training graph and its memory timeline (docs/images)
pictures: install tools
	$(PY) docs/make_pictures.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache test-artifacts
