"""The official OpenSearch API specification (../shared/opensearch-api-spec) as a validator:
find the operation for a method and path, and validate a request body against its schema."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_DIR = Path(__file__).resolve().parents[4] / "shared" / "opensearch-api-spec"


@dataclass(frozen=True)
class Operation:
    namespace_uri: str
    template: str
    method: str
    body_ref: str | None
    body_type: str | None


# libyaml where PyYAML has it: the spec is hundreds of files, slow in the Python loader.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def _load() -> tuple[Registry, list[tuple[re.Pattern, Operation]]]:
    registry = Registry()
    routes: list[tuple[re.Pattern, Operation]] = []
    for path in sorted(SPEC_DIR.rglob("*.yaml")):
        document = yaml.load(path.read_text(), Loader=LOADER)
        uri = path.resolve().as_uri()
        registry = registry.with_resource(uri, Resource.from_contents(document, DRAFT202012))
        if path.parent.name != "namespaces":
            continue
        bodies = document.get("components", {}).get("requestBodies", {})
        for template, methods in (document.get("paths") or {}).items():
            pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$")
            for method, spec in methods.items():
                if not isinstance(spec, dict):
                    continue
                ref = spec.get("requestBody", {}).get("$ref")
                body_type = None
                if ref:
                    content = bodies[ref.rsplit("/", 1)[1]]["content"]
                    body_type = next(iter(content))
                routes.append((pattern, Operation(uri, template, method, ref, body_type)))
    # Literal segments before templated ones: /_aliases must not match /{index}.
    routes.sort(key=lambda r: r[1].template.count("{"))
    return registry, routes


def operation(method: str, path: str) -> Operation:
    _, routes = _load()
    for pattern, op in routes:
        if op.method == method.lower() and pattern.match(path):
            return op
    raise AssertionError(f"{method} {path} is not an operation of the OpenSearch API")


def validate(method: str, path: str, body: object) -> Operation:
    """Raise jsonschema.ValidationError unless ``body`` is valid for the operation."""
    registry, _ = _load()
    op = operation(method, path)
    if body is None:
        return op
    assert op.body_ref, f"{method} {path} ({op.template}) takes no request body"
    name = op.body_ref.rsplit("/", 1)[1]
    if name in _PAIRED:
        # ndjson pairs: the spec's item schema is a oneOf/anyOf that cannot tell a header line
        # from a body line (unknown keys are allowed), so each line is checked for its role.
        assert isinstance(body, list) and len(body) % 2 == 0, f"{name}: unpaired lines"
        header, payload = _PAIRED[name]
        for position, line in enumerate(body):
            role = header if position % 2 == 0 else payload
            if role is not None:
                _validator(registry, _schema_uri(role)).validate(line)
        return op
    pointer = f"#/components/requestBodies/{name}/content/{op.body_type.replace('/', '~1')}/schema"
    _validator(registry, op.namespace_uri + pointer).validate(body)
    return op


_PAIRED = {
    "msearch": (
        "_core.msearch.yaml#/components/schemas/MultisearchHeader",
        "_core.msearch.yaml#/components/schemas/MultisearchBody",
    ),
    # A bulk source line is the document itself: any object.
    "bulk": ("_core.bulk.yaml#/components/schemas/OperationContainer", None),
}


def _schema_uri(reference: str) -> str:
    file, pointer = reference.split("#", 1)
    return (SPEC_DIR / "schemas" / file).resolve().as_uri() + "#" + pointer


def _validator(registry: Registry, uri: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": uri}, registry=registry)


def decode(body: bytes | str | None, content_type: str | None) -> object:
    """A recorded request body as JSON: ndjson bodies become a list of objects."""
    if body is None:
        return None
    text = body.decode() if isinstance(body, bytes) else body
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) > 1 or (content_type and "ndjson" in content_type):
        return [json.loads(line) for line in lines]
    return json.loads(text)
