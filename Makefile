SHELL := /bin/bash
VENV ?= .venv
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup run test lint eval

setup:
	bash scripts/setup.sh

# The service's main job, locally: index the PLOS starter corpus, then answer a query.
run: setup
	$(VENV)/bin/serve-app --config config/local.yaml ingest ../shared/data/plos_fulltext
	$(VENV)/bin/serve-app --config config/local.yaml search "How do bacteria resist antibiotics?"

lint: setup
	$(VENV)/bin/ruff check serve_app deployments benchmarks tests

test: setup lint
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider

eval: setup
	$(VENV)/bin/serve-app --config config/local.yaml eval --beir ../shared/data/scifact --split test
