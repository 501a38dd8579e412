# Set-up and checks. `make demo` and `make test` install everything they need into .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# This machine has a local CPU wheel of torch 2.13.0; pinning it keeps pip from pulling the
# newest CUDA build. Elsewhere, override: `make test TORCH_SPEC=torch` (or keep your own).
TORCH_SPEC ?= torch==2.13.0
CORE_STAMP := $(VENV)/.installed-core
STAMP := $(VENV)/.installed
# Azurite, Azure Blob's emulator (tests/test_remote_stores.py), is an npm package: installed
# into the venv where npm is; without npm (or if the install fails) the Azure tests skip.
AZURITE := $(VENV)/azurite/node_modules/.bin/azurite-blob

.PHONY: setup wheel demo test quick lint typecheck unit docs bench clean soak torchdata-suite mutate

setup: $(STAMP) $(AZURITE)

# pip prints one line per package (no progress bars): a fresh set-up takes a few minutes
PIP_INSTALL := $(PY) -m pip install --progress-bar off --disable-pip-version-check

# The package and torch: what the demo needs (about a minute on a fresh machine).
$(CORE_STAMP): pyproject.toml Makefile
	@echo "== setting up $(VENV) (once): torch and the package; pip lists what it installs"
	$(PYTHON) -m venv $(VENV)
	@echo "== 1/2: $(TORCH_SPEC)"
	$(PIP_INSTALL) "$(TORCH_SPEC)"
	@echo "== 2/2: the package and its dependencies (lightning, torchdata, numpy)"
	$(PIP_INSTALL) -e .
	touch $(CORE_STAMP)

# ... and the test, docs and cli extras for make test (a few minutes more).
$(STAMP): $(CORE_STAMP)
	@echo "== the test, docs and cli extras into $(VENV) (once; a few minutes)"
	$(PIP_INSTALL) -e ".[test,docs,cli]"
	touch $(STAMP)

# The peers' own writers (tests/formats: MosaicML Streaming's MDSWriter, litdata.optimize,
# webdataset's ShardWriter) in a venv of their own: their pins (numpy<2.2, transformers,
# torchvision) stay out of .venv. Tests run them in a subprocess to write the corpora.
PEERS := .venv-peers
PEERS_STAMP := $(PEERS)/.installed
PEER_PACKAGES := mosaicml-streaming==0.13.0 litdata==0.2.76 webdataset==1.0.2 wids==0.1.11 \
	pillow zstd python-snappy brotli cryptography

$(PEERS_STAMP): Makefile
	@echo "== the peers' writers (tests/formats) into $(PEERS) (once; about a minute)"
	$(PYTHON) -m venv $(PEERS)
	printf '%s\n' "$(TORCH_SPEC)" > $(PEERS)/constraints.txt
	$(PEERS)/bin/pip install --progress-bar off --disable-pip-version-check -q "$(TORCH_SPEC)"
	$(PEERS)/bin/pip install --progress-bar off --disable-pip-version-check -q \
		-c $(PEERS)/constraints.txt $(PEER_PACKAGES)
	touch $(PEERS_STAMP)

wheel: setup  ## dist/lightning_resumable_data-<version>-py3-none-any.whl, to install elsewhere
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .
	@ls dist/lightning_resumable_data-*.whl

$(AZURITE): | $(STAMP)
	@if command -v npm >/dev/null 2>&1; then \
		echo "== Azurite (Azure Blob's emulator, for the Azure tests) from npm (once; about 30 s)"; \
		npm install --prefix $(VENV)/azurite azurite@3 --no-audit --no-fund --silent \
			--no-update-notifier || echo "warning: npm could not install Azurite; the Azure tests will skip."; \
	else \
		echo "npm not found: Azurite not installed; the Azure Blob tests will skip."; \
	fi

demo: $(CORE_STAMP)  ## the package and torch only: make test adds its extras
	$(PY) examples/demo.py

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: setup
	$(PY) -m mypy

# Two worker processes, each file on one of them (a page's snippets share a namespace, and
# a file's fixtures are set up once): about half the wall time on 2 cores.
unit: setup $(PEERS_STAMP)
	$(PY) -m pytest -n 2 --dist loadfile

docs: setup
	$(PY) benchmarks/tables.py --check
	$(PY) docs/make_architecture.py --check
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

test: lint typecheck unit docs

# The inner loop (CONTRIBUTING.md): no multi-process runs, none of the slow tests.
quick: setup
	$(PY) -m pytest -q -m "not distributed and not slow" -p no:randomly

bench: setup
	$(PY) benchmarks/bench_sampler.py

# torchdata's own StatefulDataLoader suite (v0.11.0, vendored; only the import changed) run
# against ours, test_dataloader.py included; exclusions and reasons: tests/torchdata_suite/conftest.py.
torchdata-suite: setup
	LRD_TORCHDATA_FULL=1 $(PY) -m pytest tests/torchdata_suite -q -p no:randomly

soak: setup
	LRD_SOAK=1 $(PY) -m pytest tests/faults -q

# Mutation testing of the core ([tool.mutmut] in pyproject.toml: index/, samplers/, the loader,
# resume/, the callback). Hours on 2 cores, so not in CI; `mutmut results` lists the survivors.
# PYTHONPATH: the tests that train in a subprocess (tests/matrix, the examples) import the
# mutated copy too, not the installed package (mutmut passes the mutant in the environment).
mutate: setup
	$(PY) -m pip install --quiet "mutmut==3.8.1"
	@# the folder must exist before Python starts: a PYTHONPATH entry missing at start-up is
	@# cached as absent, and the mutants' conftest.py would then not be importable
	mkdir -p mutants
	PYTHONPATH=$(CURDIR)/mutants $(PY) -m mutmut run
	$(PY) -m mutmut results

clean:
	rm -rf $(VENV) $(PEERS) .mypy_cache .ruff_cache .pytest_cache .hypothesis mutants
