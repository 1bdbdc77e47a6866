# etkit developer entry points. `make demo` runs the main job; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
DEMO_OUT ?= demo-out
PYTEST_ARGS ?=
# Reference tools (the oracles etkit is compared with), in their own environment: etkit never imports them.
# mlc-chakra 1.0.0 brings chakra_jsonizer / chakra_converter and Holistic Trace Analysis (HTA) 0.5.0.
REF_VENV ?= .venv-ref

.PHONY: install refenv browser lint test demo bench clean

install: $(VENV)/.installed

refenv: $(REF_VENV)/.installed

$(REF_VENV)/.installed: Makefile
	test -x $(REF_VENV)/bin/python || python3 -m venv $(REF_VENV)
	$(REF_VENV)/bin/python -m pip install -q --upgrade pip
	$(REF_VENV)/bin/python -m pip install -q mlc-chakra==1.0.0 'holistictraceanalysis==0.5.0'
	touch $@

# torch==2.13.0 goes in first, alone: the CPU build lies on disk, and anything that pulled torch
# before it would fetch a multi-GB CUDA build instead.
$(VENV)/.installed: pyproject.toml $(wildcard src/etkit/*/*.c src/etkit/*.h)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[torch,viz,dev,dask]'
	touch $@

# The HTML report is tested in a real browser: Debian's chromium.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "make: the report tests need Debian's chromium: sudo apt-get install chromium" >&2; exit 1; fi; }

# ruff (pyflakes, import order, bugbear) and mypy (strict on etkit.format and etkit.model): pyproject.toml
lint: install
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

# Every etkit process the tests start reads compiled modules (where PYTHONDONTWRITEBYTECODE is set, each would
# otherwise compile the ~250 modules it imports again: 0.2-0.5 s of CPU a process).
test: install refenv browser
	$(PY) -m compileall -q src tests benchmarks > /dev/null
	ETKIT_REF_VENV=$(abspath $(REF_VENV)) $(PY) -m pytest -n 2 -q $(PYTEST_ARGS)

demo: install
	$(PY) -m compileall -q src > /dev/null
	$(VENV)/bin/etkit demo -o $(DEMO_OUT)

bench: install refenv
	@$(PY) -m compileall -q src > /dev/null
	@export ETKIT_REF_VENV=$(abspath $(REF_VENV)); for script in benchmarks/bench_*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) $(REF_VENV) $(DEMO_OUT) .pytest_cache build src/*.egg-info
