# Two entry points for a fresh machine: `make demo` and `make test`. Both are idempotent.
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench install proto clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The main job on the embedded default: word count over a generated ~20 MB corpus.
demo: $(STAMP)
	$(PY) examples/word_count.py

# Benchmarks against plain PySpark and a single-core Counter (prints a table; takes minutes).
bench: $(STAMP)
	$(PY) bench/run.py

test: $(STAMP)
	$(PY) -m pytest -q tests

# Regenerate the protobuf/gRPC modules from proto/*.proto (checked in; a test keeps them current).
proto: $(STAMP)
	$(PY) -m millstream.proto.generate

clean:
	rm -rf $(VENV) build *.egg-info
