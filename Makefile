SHELL := /bin/bash
VENV ?= .venv
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup run test lint eval serve-configs k8s-manifests

setup:
	bash scripts/setup.sh

# The service, locally: Ray Serve on CPU at http://127.0.0.1:8000, indexing the 122 PLOS
# articles once it is up (searchable while they stream in); Ctrl-C stops it cleanly.
run: setup
	$(VENV)/bin/serve-app --config config/local.yaml serve --port 8000 --ingest ../shared/data/plos_fulltext

lint: setup
	$(VENV)/bin/ruff check serve_app deployments benchmarks tests

test: setup lint
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider

eval: setup
	$(VENV)/bin/serve-app --config config/local.yaml eval --beir ../shared/data/scifact --split test

# Regenerate the checked-in Serve configs from the app configs (a test keeps them in sync).
serve-configs: setup
	$(VENV)/bin/python -m deployments.serve_config --config config/local.yaml -o deployments/local.yaml
	$(VENV)/bin/python -m deployments.serve_config --config config/gpu.yaml -o deployments/gpu.yaml

# Regenerate the plain Kubernetes manifests from the chart (a test keeps them in sync).
k8s-manifests: setup
	bash scripts/render_k8s.sh
