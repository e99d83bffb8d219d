# The serve-app image: Ray's own image (KubeRay runs `ray start` from its PATH) plus this
# project with the extras a GPU cluster runs: serve, stores, gpu. From the repository root:
#   docker build -t REGISTRY/serve-app:TAG .
#
# The base tag. Ray tags its images {ray version}-py{XY}-cu{major}{minor}: Ray's CI writes
# CUDA 12.8.1 as cu128, and there is no "cu12x" tag. 2.60.0 is rayVersion in
# helm/serve-app/values.yaml and ray[serve]==2.60.0 in pyproject.toml (tests/image checks
# both). py311 matches requires-python. cu128 is the CUDA line Ray builds its own vLLM image
# (ray-llm) on for Python 3.11. vLLM 0.32 pins torch==2.13.0, and the PyPI build of that torch
# brings its own CUDA 13.0 runtime wheels. The GPU nodes therefore need an NVIDIA driver for
# CUDA 13 (580 or newer), whatever the base image's CUDA is.
FROM rayproject/ray:2.60.0-py311-cu128

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Ray's image creates the user ray with uid 1000 and gid 100 (users), home /home/ray, and
# Python in /home/ray/anaconda3 (first on PATH, owned by ray). The chart runs the pods as
# 1000:100 as well.
USER 1000:100
WORKDIR /home/ray/serve-app

# Only what the install needs (.dockerignore keeps the rest of the context out): the package
# metadata (pyproject.toml reads README.md), the two packages, the configurations and the
# install script.
COPY --chown=1000:100 pyproject.toml README.md ./
COPY --chown=1000:100 scripts/install_image.sh scripts/
COPY --chown=1000:100 serve_app/ serve_app/
COPY --chown=1000:100 deployments/ deployments/
COPY --chown=1000:100 config/ config/

# The one install path, which CI also runs in a clean venv (tests/image/test_image.py). The
# project goes into the image's Python as a package, and the build leftovers are removed.
# Caches live under the home directory, which must stay writable for the pod's user.
RUN PIP_NO_CACHE_DIR=1 bash scripts/install_image.sh --python python3 --extras serve,stores,gpu \
    && rm -rf build ./*.egg-info \
    && mkdir -p /home/ray/.cache/huggingface \
    && chmod -R u+rwX,g+rwX /home/ray/.cache

# Models come from files only (the chart mounts the model cache and sets HF_HOME under it).
# Caches default to the home directory. The chart mounts an emptyDir on /tmp, and the
# image's own /tmp is world-writable.
ENV HF_HUB_OFFLINE=1 \
    HF_HOME=/home/ray/.cache/huggingface \
    XDG_CACHE_HOME=/home/ray/.cache

WORKDIR /home/ray
