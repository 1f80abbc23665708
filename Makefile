# `make demo` and `make test` work on a fresh machine: they create .venv and install first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-test

.PHONY: install test demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: install
	$(PY) -m pytest -q

demo: install
	$(PY) examples/cnn.py --graph --epochs 10

# torch is pinned to a CPU build here; any torch >= 2.0 works for bench/step_time.py
bench: install
	$(PY) -m pip install -q 'torch==2.13.0' -e '.[bench]'
	$(PY) bench/memory.py
	$(PY) bench/overhead.py
	$(PY) bench/step_time.py
	$(PY) bench/dist.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
