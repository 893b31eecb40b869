# The two commands of the README contract: `make demo` and `make test`.
# Each creates or refreshes .venv, installs the project and its system data, then runs.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz

.PHONY: demo test install system-data clean

demo: install system-data
	$(BIN)/congruent demo

test: install system-data
	$(BIN)/python -m pytest -q

install: $(STAMP)

# torch/torchvision are pinned to the builds that lie on local disk (see pyproject.toml).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m pip check
	touch $@

# Fashion-MNIST comes from Debian's dataset-fashion-mnist package: no download at run time.
system-data:
	@test -f $(FMNIST) || $(SUDO) apt-get install -y -q dataset-fashion-mnist \
	  || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q dataset-fashion-mnist)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache demo-output
