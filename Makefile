# One command sets up and serves the problem site; one sets up and runs the tests.
#   make serve    install everything, build the site, serve it on localhost
#   make test     install everything, then lint and run the whole test suite

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup site-deps system-deps site serve test lint bench mutation

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt pip
	# torch first and pinned: a CPU build; an unpinned torch pulls GBs of CUDA packages.
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

setup: $(STAMP)

# Debian packages, installed when missing (as root; otherwise the apt-get line to run is printed).
# $(1) lists command:package pairs.
define need-debian
	@missing=""; \
	for pair in $(1); do command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair##*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing Debian packages:$$missing; install them with: sudo apt-get install$$missing"; exit 1; fi; \
	fi
endef

# npm builds the site; the sandbox needs bubblewrap and the browser tests chromium.
site-deps:
	$(call need-debian,npm:npm)

system-deps:
	$(call need-debian,npm:npm bwrap:bubblewrap chromium:chromium)

# The browser site: pinned Pyodide assets (cached in .cache/), npm ci, pages into web/dist/.
site: setup site-deps
	$(BIN)/grpo-kit build

serve: setup site-deps
	$(BIN)/grpo-kit serve

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: setup system-deps lint site
	$(BIN)/python -m pytest

bench: setup system-deps
	@for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

# Mutation testing of the hidden tests (minutes; not part of `make test`): the score per problem.
mutation: setup
	$(BIN)/grpo-kit mutation
