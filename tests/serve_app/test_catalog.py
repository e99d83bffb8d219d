"""One way to register a component: ``register_lazy`` beside its catalog, so every name is
known before anything is imported (a configuration is checked as it parses) and each target
resolves to its factory."""

import subprocess
import sys

import pytest

from serve_app.catalog import Catalog
from serve_app.errors import ConfigError

CATALOGS = {
    "serve_app.chunking.base:CHUNKERS": {"sliding_window", "sections", "imrad"},
    "serve_app.encoders.base:DENSE_BACKENDS": {"transformers", "vllm", "vllm-http"},
    "serve_app.encoders.base:RERANKER_BACKENDS": {"transformers", "vllm"},
    "serve_app.stores.base:TOPOLOGIES": {"embedded", "qdrant", "opensearch+qdrant"},
    "serve_app.generation:LLM_BACKENDS": {"llama.cpp", "vllm"},
    "serve_app.loaders.base:LOADERS": {"text", "markdown", "html", "jats", "pdf"},
}

PROBE = """
import importlib, json, sys
names = {}
for path in sys.argv[1:]:
    module, _, attribute = path.partition(":")
    names[path] = getattr(importlib.import_module(module), attribute).names()
implementations = sorted(
    m for m in sys.modules
    if m.startswith(("serve_app.encoders.dense_", "serve_app.encoders.reranker",
                     "serve_app.chunking.imrad", "serve_app.chunking.sections",
                     "serve_app.chunking.sliding_window", "serve_app.loaders.pdf",
                     "serve_app.generation.llama_cpp", "serve_app.stores.embedded"))
)
print(json.dumps({"names": names, "imported": implementations}))
"""


def test_every_name_is_known_before_any_component_is_imported():
    import json

    out = subprocess.run(
        [sys.executable, "-c", PROBE, *CATALOGS],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert {k: set(v) for k, v in seen["names"].items()} == CATALOGS
    assert seen["imported"] == []


@pytest.mark.parametrize("path", [p for p in CATALOGS if "vllm" not in str(CATALOGS[p])])
def test_each_target_resolves_to_a_callable(path):
    import importlib

    module, _, attribute = path.partition(":")
    catalog: Catalog = getattr(importlib.import_module(module), attribute)
    for name in catalog.names():
        assert callable(catalog.get(name)), (path, name)


def test_an_unknown_name_is_a_config_error_naming_the_field():
    catalog: Catalog[object] = Catalog("widget", "widgets.kind")
    catalog.register_lazy("round", "builtins:object")
    with pytest.raises(ConfigError, match=r"widgets\.kind: unknown widget 'square'; known: round"):
        catalog.check("square")
    with pytest.raises(ValueError, match="registered twice"):
        catalog.register_lazy("round", "builtins:object")
    assert catalog.create("round") is not None
