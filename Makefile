# Fermix: `make run` serves the app and its task cluster; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: run test test-sqlite test-postgres lint bench soak clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.txt | $(VENV)/bin/python
	$(PIP) install -r requirements.txt
	touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt | $(VENV)/bin/python
	$(PIP) install -r requirements-dev.txt
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(PY) manage.py migrate --noinput -v0
	$(PY) manage.py fermix_setup --noinput
	$(PY) manage.py ensure_admin
	exec $(PY) manage.py serve

# The whole suite on SQLite, then again on PostgreSQL (the browser and live-server tests only once: they
# test pages and the server, each on its own SQLite FERMIX_HOME). The tests are shared among TEST_WORKERS
# pytest processes, a file at a time (docs/reliability.md); TEST_WORKERS=0 runs them in this one.
TEST_WORKERS ?= 3
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test: $(VENV)/.dev-installed
	bash scripts/test-setup.sh
	$(PYTEST)
	DATABASE_URL=$(POSTGRES_URL) $(PYTEST) -m "not browser and not live"

test-sqlite: $(VENV)/.dev-installed
	$(PYTEST)

test-postgres: $(VENV)/.dev-installed
	DATABASE_URL=$(POSTGRES_URL) $(PYTEST) -m "not browser and not live"

# BENCH_SIZE=full for 1M messages / 100k memory rows; BENCH_ARGS="--reuse DIR --only a,b" to narrow.
bench: $(VENV)/.dev-installed
	$(PY) -m bench.run --size $${BENCH_SIZE:-quick} $${BENCH_ARGS}

soak: $(VENV)/.dev-installed
	$(PY) -m bench.load --seconds $${SOAK_SECONDS:-600}

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
