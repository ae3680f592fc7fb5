# Two entry points for a fresh machine: `make demo` and `make test`. Both are idempotent.
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install proto clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Until the cluster runtime lands, the demo shows the word-count job's JobGraph plan.
demo: $(STAMP)
	$(VENV)/bin/millstream plan examples/word_count.py
	$(VENV)/bin/millstream plan examples/word_count.py --json

test: $(STAMP)
	$(PY) -m pytest -q tests

# Regenerate the protobuf/gRPC modules from proto/*.proto (checked in; a test keeps them current).
proto: $(STAMP)
	$(PY) -m millstream.proto.generate

clean:
	rm -rf $(VENV) build *.egg-info
