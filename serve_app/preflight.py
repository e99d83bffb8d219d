"""``serve-app validate``: the configuration checked against reality before serving.

Each check names the configuration field it concerns and, when it fails, what to change:
credentials variables are set; every configured ``cuda`` device exists (the GPU rule: no
silent CPU fallback); the chunker counts tokens like the dense model; every model loads; every
store is reachable and holds the index under its alias, built with these models (same
binding: model ids and revisions; same dimension), with its payload indexes; a model cache the
model fetch filled holds the configured revision (its manifest). Nothing is written anywhere.

Without loading (``validate --no-load``, the chart's pre-upgrade hook, a pod without the
replicas' GPUs): the device checks are reported as not run (``ok`` is ``None``), and each
configured model's files are checked instead of loading it (config.json, tokenizer, every
weights file, every shard an index names); the dense dimension comes from the model's
config.json, read as the encoders read it from the loaded model. Everything else is the same.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from serve_app.config import AppConfig, resolve_model_path
from serve_app.errors import ModelMismatchError, ServeAppError
from serve_app.model_manifest import loaded_revision
from serve_app.stores.base import PAYLOAD_INDEXES, TOPOLOGIES, Backend, IndexModels
from serve_app.stores.binding import judge_binding
from serve_app.stores.index import StoreIndex

log = logging.getLogger(__name__)

# Texts whose token counts the chunker's and the dense model's tokenizers must agree on:
# prose, numbers and units, punctuation, casing, a long compound, non-ASCII.
PROBES = (
    "Plasmids carry antibiotic resistance genes between bacteria by conjugation.",
    "The HbA1c level fell from 7.9% to 6.4% (p < 0.001) after 12 weeks; n = 1,204.",
    "Pseudomonas aeruginosa PAO1 forms biofilms in cystic-fibrosis airways.",
    "Qdrant, OpenSearch and BM25: hybrid retrieval with SPLADE v3 and RRF (k=60).",
    "Größenordnung, naïve café, 東京 and emoji 🚀 in one line.",
)


@dataclass
class Check:
    name: str
    field: str
    ok: bool | None  # None: not run in this mode (reported, never counted as passed)
    message: str


class _Checks:
    def __init__(self) -> None:
        self.items: list[Check] = []

    def add(self, name: str, field: str, ok: bool, message: str) -> bool:
        self.items.append(Check(name, field, ok, message))
        return ok

    def not_run(self, name: str, field: str, message: str) -> None:
        self.items.append(Check(name, field, None, message))


# -- credentials ---------------------------------------------------------------------------
def _credential_fields(config: AppConfig) -> list[tuple[str, str | None]]:
    stores, topology = config.stores, config.stores.topology
    fields: list[tuple[str, str | None]] = []
    if config.api.auth.jwt.enabled:
        fields.append(("api.auth.jwt.secret_env", config.api.auth.jwt.secret_env))
    if topology == "opensearch+qdrant":
        fields += [
            ("stores.opensearch.username_env", stores.opensearch.username_env),
            ("stores.opensearch.password_env", stores.opensearch.password_env),
        ]
    if topology != "embedded":
        fields.append(("stores.qdrant.api_key_env", stores.qdrant.api_key_env))
    if config.dense.backend == "vllm-http":
        fields.append(("dense.http.api_key_env", config.dense.http.api_key_env))
    return [(f, name) for f, name in fields if name]


def check_credentials(config: AppConfig, checks: _Checks) -> None:
    for field, variable in _credential_fields(config):
        present = bool(os.environ.get(variable))
        checks.add(
            "credentials",
            field,
            present,
            f"{variable} is set"
            if present
            else f"{field} names the environment variable {variable}, which is not set; "
            "set it (from its Secret) or clear the field",
        )


# -- devices ---------------------------------------------------------------------------------
def _device_sections(config: AppConfig) -> list[tuple[str, str]]:
    sections = [("dense", config.dense.device)]
    if config.splade.enabled:
        sections.append(("splade", config.splade.device))
    if config.reranker.enabled:
        sections.append(("reranker", config.reranker.device))
    return sections


def _device_fields(config: AppConfig) -> list[tuple[str, str]]:
    """Every section with a device: the encoders and, when enabled, the LLM."""
    fields = _device_sections(config)
    if config.llm.enabled:
        fields.append(("llm", config.llm.device))
    return fields


def check_devices(config: AppConfig, checks: _Checks) -> set[str]:
    """The sections whose device exists (their models are loaded next)."""
    import torch

    usable = set()
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for section, device in _device_fields(config):
        field = f"{section}.device"
        if not device.startswith("cuda"):
            checks.add("device", field, True, f"{device!r}")
            usable.add(section)
            continue
        _, _, number = device.partition(":")
        wanted = int(number) if number.isdigit() else 0
        if visible == 0:
            message = (
                f"{field} is {device!r} but no CUDA GPU is visible to this process; give the "
                f"pod a GPU (nvidia.com/gpu) or set {field}: cpu to run on the CPU explicitly"
            )
        elif wanted >= visible:
            message = (
                f"{field} is {device!r} but only {visible} CUDA GPU(s) are visible; "
                f"use cuda:0..cuda:{visible - 1}"
            )
        else:
            message = f"{device!r}: {torch.cuda.get_device_name(wanted)}"
        if checks.add("device", field, visible > wanted, message):
            usable.add(section)
    return usable


def devices_not_run(config: AppConfig, checks: _Checks) -> None:
    """--no-load: this pod is not where the models run; say so for each device."""
    for section, device in _device_fields(config):
        checks.not_run(
            "device",
            f"{section}.device",
            f"not run (--no-load): {device!r} is not looked for in this pod, which loads no "
            "model; the replicas' pods check it when they load (run validate without --no-load "
            "there)",
        )


# -- tokenizers --------------------------------------------------------------------------------
def check_tokenizer(config: AppConfig, checks: _Checks) -> None:
    from serve_app.chunking.tokens import load_tokenizer

    field = "chunker.tokenizer"
    chunker_spec, chunker_revision = config.chunker_tokenizer()
    try:
        chunker = load_tokenizer(resolve_model_path(chunker_spec, chunker_revision))
        dense = load_tokenizer(resolve_model_path(config.dense.model, config.dense.revision))
    except (OSError, ValueError, ServeAppError) as error:
        checks.add("tokenizer", field, False, f"cannot load a tokenizer: {error}")
        return
    for probe in PROBES:
        ours = len(chunker(probe, add_special_tokens=False)["input_ids"])
        theirs = len(dense(probe, add_special_tokens=False)["input_ids"])
        if ours != theirs:
            checks.add(
                "tokenizer",
                field,
                False,
                f"the chunker's tokenizer ({chunker_spec}) counts {ours} tokens where "
                f"dense.model's counts {theirs} in {probe!r}: chunks would not fit the model's "
                "window as sized; leave chunker.tokenizer empty (the dense model's) or name "
                "the dense model's tokenizer",
            )
            return
    checks.add(
        "tokenizer", field, True, f"token counts agree with dense.model on {len(PROBES)} probes"
    )


# -- models ------------------------------------------------------------------------------------
def _close(model: Any) -> None:
    close = getattr(model, "close", None)
    if close is not None:
        close()


def load_models(config: AppConfig, usable: set[str], checks: _Checks) -> tuple[str, int] | None:
    """Load every configured model on a usable device; (dense model id, dimension) when the
    dense model loaded."""
    from serve_app.encoders.base import DENSE_BACKENDS, RERANKER_BACKENDS

    dense_info = None
    for section, _ in _device_sections(config):
        field = f"{section}.model"
        spec = getattr(config, section).model
        if section not in usable:
            checks.add("model", field, False, f"not loaded: {section}.device is not available")
            continue
        try:
            if section == "dense":
                model: Any = DENSE_BACKENDS.create(config.dense.backend, config.dense)
                dense_info = (model.model_id, int(model.dim))
                detail = f"{spec} loads ({model.dim} dimensions)"
            elif section == "splade":
                from serve_app.encoders.splade import SpladeEncoder

                model = SpladeEncoder(config.splade)
                detail = f"{spec} loads"
            else:
                model = RERANKER_BACKENDS.create(config.reranker.backend, config.reranker)
                detail = f"{spec} loads"
        except Exception as error:  # any failure to load is this check's finding
            message = error.message if isinstance(error, ServeAppError) else str(error)
            checks.add("model", field, False, f"cannot load {spec!r}: {message}")
            continue
        _close(model)
        checks.add("model", field, True, detail)
    return dense_info


# -- model files (--no-load) -------------------------------------------------------------------
# A tokenizer loads from tokenizer.json, or from a vocabulary: WordPiece vocab.txt, BPE
# vocab.json (+ merges.txt), SentencePiece *.model.
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "*.model")
_WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")
_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _model_folder(spec: str, revision: str | None) -> Path | None:
    """The folder a model reference loads from: a path, a ``package:`` folder, or a Hub id
    already in the local Hugging Face cache (loads are offline); None when there is none."""
    try:
        resolved = resolve_model_path(spec, revision)
    except ServeAppError:
        return None
    if Path(resolved).is_dir():
        return Path(resolved)
    if Path(resolved).is_absolute() or resolved.count("/") != 1:
        return None
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(resolved, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError):
        return None


def _present(folder: Path, pattern: str) -> bool:
    """A non-empty file matching ``pattern`` (a name or a glob) is in ``folder``."""
    return any(p.is_file() and p.stat().st_size > 0 for p in folder.glob(pattern))


def missing_model_files(folder: Path, weights: bool = True) -> list[str]:
    """What a load of ``folder`` reads and does not find there (an empty file is missing):
    config.json, a tokenizer, and the weights: every shard its index names, else any
    safetensors or PyTorch file. Nothing is opened but the index."""
    missing = [] if _present(folder, "config.json") else ["config.json"]
    if not any(_present(folder, p) for p in _TOKENIZER_FILES):
        missing.append("a tokenizer (tokenizer.json, vocab.txt, vocab.json or *.model)")
    if not weights:
        return missing
    index = next((folder / n for n in _WEIGHT_INDEXES if _present(folder, n)), None)
    if index is not None:
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            return [*missing, f"a readable {index.name} ({type(error).__name__})"]
        absent = [shard for shard in shards if not _present(folder, shard)]
        if absent:
            missing.append(f"{', '.join(absent)} (listed in {index.name})")
    elif not any(_present(folder, p) for p in _WEIGHT_FILES):
        missing.append("weights (*.safetensors or pytorch_model*.bin)")
    return missing


def config_dense_dim(config: AppConfig, folder: Path) -> int:
    """The dense dimension the loaded model would report, from its config.json alone.

    The encoders take the model's hidden size, then ``dense.output_dim`` when set
    (``dense_inputs.output_dim``): transformers reads ``model.config.hidden_size`` of
    ``AutoModel.from_pretrained`` (the same AutoConfig), vLLM ``model_config.get_hidden_size()``,
    the hidden size of the text config (``get_text_config()``: the config itself for Qwen3 and
    BERT). The vllm-http server serves the same model.
    """
    from transformers import AutoConfig

    from serve_app.encoders.dense_inputs import output_dim

    model_config = AutoConfig.from_pretrained(str(folder))
    if config.dense.backend != "transformers":
        model_config = model_config.get_text_config()
    hidden = getattr(model_config, "hidden_size", None)
    if not isinstance(hidden, int):
        raise ValueError(f"{folder / 'config.json'} has no hidden_size")
    return output_dim(config.dense, hidden)


def check_model_files(config: AppConfig, checks: _Checks) -> tuple[str, int] | None:
    """Instead of loading each model: its files are there; (dense model id, dimension from its
    config.json) when the dense model's are."""
    dense_info = None
    for section, _ in _device_sections(config):
        field = f"{section}.model"
        spec = getattr(config, section).model
        folder = _model_folder(spec, getattr(config, section).revision)
        if folder is None:
            checks.add(
                "model_files",
                field,
                False,
                f"{field} is {spec!r}, which is no folder in this pod (nor a Hub id in the "
                "local Hugging Face cache); fetch the model there (the chart's model-fetch Job "
                f"fills modelCache) or point {field} at it",
            )
            continue
        served_elsewhere = section == "dense" and config.dense.backend == "vllm-http"
        missing = missing_model_files(folder, weights=not served_elsewhere)
        if missing:
            checks.add(
                "model_files",
                field,
                False,
                f"{folder} lacks {'; '.join(missing)}: an incomplete or wrong model folder; "
                f"fetch it again or fix {field}",
            )
            continue
        detail = f"{folder}: config.json, tokenizer" + (
            " (weights on the vLLM server, dense.http.url)" if served_elsewhere else ", weights"
        )
        if section == "dense":
            try:
                dim = config_dense_dim(config, folder)
            except (OSError, ValueError, ServeAppError) as error:
                message = error.message if isinstance(error, ServeAppError) else str(error)
                checks.add("model_files", field, False, f"cannot read {folder}: {message}")
                continue
            dense_info = (config.dense.model, dim)
            detail += f"; {dim} dimensions (config.json" + (
                ", dense.output_dim)" if config.dense.output_dim else ")"
            )
        checks.add("model_files", field, True, f"{detail}; not loaded (--no-load)")
    return dense_info


# -- stores ------------------------------------------------------------------------------------
def _store_fields(config: AppConfig, backend: Backend) -> tuple[str, str]:
    """(where the store is configured, what names its index) for messages."""
    if backend.name == "qdrant-edge":
        return "stores.embedded.path", "stores.embedded.path"
    if backend.name == "qdrant":
        where = "stores.qdrant.url" if config.stores.qdrant.url else "stores.qdrant.local_path"
        return where, "stores.qdrant.collection"
    return "stores.opensearch.hosts", "stores.opensearch.index"


def expected_binding(backend: Backend, models: IndexModels) -> dict[str, Any]:
    """What ``backend`` records about ``models`` when it builds an index."""
    connection = getattr(backend, "connection", backend)  # what records the binding
    binding = getattr(connection, "binding", None)
    recorded = binding(models) if binding is not None else models.as_dict()
    return recorded.get("models", recorded)  # OpenSearch keeps its mapping version beside it


_BINDING_FIELDS = {
    "dense_model": "dense.model",
    "dense_revision": "dense.revision",
    "splade_revision": "splade.revision",
    "splade_model": "splade.model",
    "bm25_model": "bm25",
    "payload_schema": "stores.migrate",
}


async def check_stores(
    config: AppConfig,
    dense: tuple[str, int] | None,
    checks: _Checks,
    missing_index_ok: bool = False,
) -> None:
    from serve_app.pipelines.components import index_models

    index = TOPOLOGIES.create(config.stores.topology, config)
    assert isinstance(index, StoreIndex)
    try:
        for backend in index.backends:
            await _check_store(config, backend, dense, checks, index_models, missing_index_ok)
    finally:
        await index.close()


async def _check_store(config, backend, dense, checks, index_models, missing_index_ok) -> None:  # type: ignore[no-untyped-def]
    where, alias_field = _store_fields(config, backend)
    try:
        await backend.attach()
        described = await backend.describe()
    except ServeAppError as error:
        if error.code == "INDEX_IN_USE":  # a running service holds it: never open it beside
            checks.not_run("store", where, f"{backend.name}: {error.message}")
            return
        missing = error.code == "NOT_FOUND"  # reached, but no index under the alias
        if missing and missing_index_ok:
            checks.not_run(
                "store",
                alias_field,
                f"{backend.name} reachable, no index yet: {error.message}; the service "
                "creates it at its first start (--missing-index-ok: a first install)",
            )
            return
        checks.add(
            "store",
            alias_field if missing else where,
            False,
            f"{backend.name}: {error.message}"
            + (
                "; the service creates it at its first start (or point at the existing one)"
                if missing
                else f"; check {where} and that the store is up"
            ),
        )
        return
    place = described.get("physical") or described.get("location")
    checks.add("store", where, True, f"{backend.name} reachable; index {place}")
    stored = described.get("binding") or {}
    if dense is not None:
        model_id, dim = dense
        checks.add(
            "dimension",
            "dense.model",
            stored.get("dense_dim") == dim,
            f"{backend.name} index {place} holds {stored.get('dense_dim')}-d vectors and "
            f"dense.model produces {dim}-d"
            + (
                ""
                if stored.get("dense_dim") == dim
                else "; use the model the index was built with (or dense.output_dim), or "
                "set stores.migrate: true and re-ingest"
            ),
        )
        try:
            expected = expected_binding(backend, index_models(config, model_id, dim))
        except ModelMismatchError:  # the cache holds another revision: the revision check
            checks.not_run("binding", "dense.revision", "the model cache disagrees (revision)")
            _check_payload_indexes(backend, described, alias_field, checks)
            return
        # The stores' own model guard: what it would refuse, with the dimension reported by
        # the check above; revisions an older index never recorded are not a difference.
        verdict = judge_binding(stored, expected)
        unrecorded = verdict.unrecorded
        differ = {k: pair for k, pair in verdict.differences.items() if k != "dense_dim"}
        fields = sorted({_BINDING_FIELDS.get(key, key) for key in differ})
        checks.add(
            "binding",
            ", ".join(fields) or "dense.model",
            not differ,
            f"{backend.name} index {place} was built with the configured models"
            + (
                f" (it records no {', '.join(unrecorded)}: built before revisions were "
                "recorded; the service records the configured one at its next start)"
                if unrecorded
                else ""
            )
            if not differ
            else f"{backend.name} index {place} was built with other models: "
            + "; ".join(f"{k} is {a!r} there, {b!r} here" for k, (a, b) in differ.items())
            + "; configure the models it was built with, or set stores.migrate: true (a new "
            "version behind the alias) and re-ingest",
        )
    _check_payload_indexes(backend, described, alias_field, checks)


def _check_payload_indexes(backend, described, alias_field, checks) -> None:  # type: ignore[no-untyped-def]
    if str(described.get("location", "")).startswith("local mode"):
        checks.add(
            "payload_indexes",
            alias_field,
            True,
            "qdrant-client local mode keeps no payload indexes (exact search); not checked",
        )
        return
    held = {name.removesuffix(".keyword") for name in described.get("payload_indexes") or {}}
    missing = [f for f in PAYLOAD_INDEXES if f not in held]
    checks.add(
        "payload_indexes",
        alias_field,
        not missing,
        f"{backend.name} indexes {', '.join(PAYLOAD_INDEXES)}"
        if not missing
        else f"{backend.name} index {described.get('physical') or described.get('location')} "
        f"lacks payload indexes on {', '.join(missing)} (filters on them scan every chunk, "
        "or fail); set stores.migrate: true to build a new version with them and re-ingest",
    )


# -- all of it -----------------------------------------------------------------------------
# -- the LLM -----------------------------------------------------------------------------------
def check_llm(config: AppConfig, checks: _Checks, load: bool) -> None:
    """The LLM's model: a GGUF against its pinned digest (llama.cpp), or a vLLM model folder's
    files; with ``load``, a llama.cpp model also writes one token (vLLM's engine is left to its
    replica, whose device check is ``llm.device``)."""
    llm = config.llm
    if not llm.enabled:
        return
    if llm.backend == "llama.cpp":
        from serve_app.generation.model_files import resolve_gguf

        try:
            path = resolve_gguf(llm.model, llm.model_dir, llm.sha256)
        except ServeAppError as error:
            checks.add("model", "llm.model", False, error.message)
            return
        if not load:
            checks.add("model", "llm.model", True, f"{path} matches its pinned SHA-256")
            return
        from serve_app.generation import GenerationParams, Message, build_llm

        try:
            model: Any = build_llm(llm)
            done = asyncio.run(
                model.complete([Message("user", "Say OK.")], GenerationParams(max_tokens=1))
            )
        except Exception as error:  # any failure to load or generate is this check's finding
            message = error.message if isinstance(error, ServeAppError) else str(error)
            checks.add("model", "llm.model", False, f"cannot load {llm.model!r}: {message}")
            return
        _close(model)
        checks.add(
            "model", "llm.model", True, f"{path} (pinned SHA-256) loads and wrote {done.text!r}"
        )
        return
    folder = _model_folder(llm.model, llm.revision)
    if folder is None:
        checks.add("model", "llm.model", False, f"{llm.model!r} is not a folder or cached model")
        return
    missing = missing_model_files(folder)
    checks.add(
        "model",
        "llm.model",
        not missing,
        f"{folder}: missing {', '.join(missing)}" if missing else f"{folder} has its files",
    )


def _pinned_models(config: AppConfig) -> list[tuple[str, str, str | None]]:
    """(revision field, model reference, configured revision) of each model in use."""
    sections = [("dense", config.dense)]
    if config.splade.enabled:
        sections.append(("splade", config.splade))
    if config.reranker.enabled:
        sections.append(("reranker", config.reranker))
    if config.llm.enabled:
        sections.append(("llm", config.llm))
    return [(f"{name}.revision", section.model, section.revision) for name, section in sections]


def check_revisions(config: AppConfig, checks: _Checks) -> None:
    """Each model the model fetch recorded a revision for (its manifest) holds the configured
    revision; reported for pinned models too."""
    for field, model, configured in _pinned_models(config):
        try:
            revision = loaded_revision(model, configured, field)
        except ModelMismatchError as error:
            checks.add("revision", field, False, error.message)
            continue
        if revision is not None:
            source = "pinned" if revision == configured else "the model cache's manifest"
            checks.add("revision", field, True, f"{model} at revision {revision} ({source})")


async def validate(
    config: AppConfig, load: bool = True, missing_index_ok: bool = False
) -> list[Check]:
    """Every check; ``load=False`` (``--no-load``) checks model files instead of loading the
    models and reports the device checks as not run; ``missing_index_ok``: a store reached
    with no index under the alias yet (a first install) is reported as not run, not failed."""
    checks = _Checks()
    check_credentials(config, checks)
    if load:
        usable = check_devices(config, checks)
        check_tokenizer(config, checks)
        dense = load_models(config, usable, checks)
    else:
        devices_not_run(config, checks)
        check_tokenizer(config, checks)
        dense = check_model_files(config, checks)
    await asyncio.to_thread(check_llm, config, checks, load)
    check_revisions(config, checks)
    await check_stores(config, dense, checks, missing_index_ok)
    return checks.items


def passed(checks: list[Check]) -> bool:
    """No check failed (a check not run is no failure, and shows as such)."""
    return not any(c.ok is False for c in checks)


def report(checks: list[Check]) -> dict[str, Any]:
    return {"ok": passed(checks), "checks": [asdict(c) for c in checks]}


_LABELS = {True: "ok  ", False: "FAIL", None: "skip"}


def format_checks(checks: list[Check]) -> str:
    lines = [f"{_LABELS[c.ok]}  {c.name:<16} {c.field:<28} {c.message}" for c in checks]
    failed = sum(c.ok is False for c in checks)
    not_run = sum(c.ok is None for c in checks)
    summary = f"{len(checks) - failed - not_run} passed, {failed} failed"
    lines.append(summary + (f", {not_run} not run" if not_run else ""))
    return "\n".join(lines)
