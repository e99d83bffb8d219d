"""Schemathesis against the served OpenAPI (bounded): no 5xx, every response as documented."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings


@pytest.fixture(scope="session")
def served_schema(serve_url):
    return schemathesis.openapi.from_url(f"{serve_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("served_schema")


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_schema(case):
    case.call_and_validate(headers={"X-API-Key": "key-a"}, timeout=60)
