# The two commands a newcomer needs: `make run` (the local stack) and `make test` (the suite).
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0

.PHONY: install run test clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU torch first, so nothing later pulls a multi-GB CUDA build.
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	# Every role (gateway, engine, dev tools) in one venv; a gateway-only host needs just `pip install .` (no torch).
	$(PY) -m pip install -q -e ".[engine,dev]"
	touch $@

install: $(VENV)/.installed

run: install
	$(VENV)/bin/sluicegate up

test: install
	$(PY) -m pytest -q -x -p no:cacheprovider

clean:
	rm -rf $(VENV) .sluicegate
