# One command sets up and serves the problem site; one sets up and runs the tests.
#   make serve    install everything, build the site, serve it on localhost
#   make test     install everything, then lint and run the whole test suite

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup system-deps serve test lint bench

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: a CPU build; an unpinned torch pulls GBs of CUDA packages.
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

setup: $(STAMP)

# Debian packages the sandbox (bubblewrap) and the browser tests (chromium) need.
system-deps:
	@missing=""; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing Debian packages:$$missing; install them with: sudo apt-get install$$missing"; exit 1; fi; \
	fi

serve: setup
	$(BIN)/grpo-kit serve

lint: setup
	$(BIN)/ruff check .

test: setup system-deps lint
	$(BIN)/python -m pytest

bench: setup system-deps
	@for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done
