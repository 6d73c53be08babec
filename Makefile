# vancetope-rag — `make demo` sets everything up and runs the main job; `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEMO_STORE := sqlite:///.demo/rag.db
DEMO_QUESTION ?= How many vacation days do I get per year?
RAG := $(BIN)/vancetope-rag --store $(DEMO_STORE)

.PHONY: setup demo test test-all lint bench clean

$(VENV)/.installed: pyproject.toml plugins/vancetope-rag-eml/pyproject.toml \
		plugins/llm-vancetope-rag/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of exactly this torch lies on disk here; any other spec pulls CUDA (GBs).
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[all,dev]' -e plugins/vancetope-rag-eml -e plugins/llm-vancetope-rag
	touch $@

setup: $(VENV)/.installed

demo: setup
	rm -rf .demo && mkdir -p .demo
	$(RAG) settings set ai.embedding.provider embedded --scope tenant
	$(RAG) import examples/handbook
	$(RAG) index
	$(RAG) status
	@echo "--- <rag-context> for: $(DEMO_QUESTION)"
	@$(RAG) context "$(DEMO_QUESTION)" --recipe docs-assistant | tee .demo/context.txt
	@grep -q '<rag-context>' .demo/context.txt || (echo "demo produced no <rag-context> block" >&2; exit 1)

# Lint first: a formatting or type error fails in seconds, not after the suite.
test: lint
	@scripts/ensure-system-packages.sh
	$(BIN)/python -m pytest -q

# Also what takes more than ~10 s of a core (marked `slow`).
test-all: lint
	@scripts/ensure-system-packages.sh
	$(BIN)/python -m pytest -q -m "slow or not slow"

LINTED := src tests bench plugins scripts

lint: setup
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

bench: setup
	$(BIN)/python bench/scifact.py
	$(BIN)/python bench/indexing.py
	$(BIN)/python bench/pre_turn.py

clean:
	rm -rf .demo $(VENV) build *.egg-info
