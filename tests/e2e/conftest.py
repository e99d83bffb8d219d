"""A real local Ray Serve deployment of the whole application (CPU, real small models)."""

import os
import time

import httpx
import pytest

from serve_app.api.auth import hash_api_key
from serve_app.ports import free_port

KEYS = {
    "key-a": ("tenant-a", ["read", "write"]),
    "key-b": ("tenant-b", ["read", "write"]),
    "key-read": ("tenant-a", ["read"]),
    "key-c": ("tenant-c", ["read", "write"]),
}


@pytest.fixture(scope="session")
def serve_config(app_config_factory):
    api_keys = [
        {"name": key, "sha256": hash_api_key(key), "tenant_id": tenant, "scopes": scopes}
        for key, (tenant, scopes) in KEYS.items()
    ]
    return app_config_factory(
        api={
            "auth": {"mode": "required", "api_keys": api_keys},
            "max_request_bytes": 3_000_000,
            # The overload tests fill the LLM replica (2 slots + 4 queued) from one tenant:
            # its own limit (tests/serve_app/api/test_tenant_fairness.py) must not come first.
            "tenants": {"max_concurrent_answers": 16},
        },
        serve={"port": free_port()},
        # A client that hangs up stops its answer at once (the tests here show that through
        # Serve); reconnects (answer.resume_s) are tested in process.
        answer={"resume_s": 0},
    )


@pytest.fixture(scope="session")
def serve_url(serve_config):
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from deployments.local.launcher import start, stop

    started = time.perf_counter()
    url = start(serve_config, num_cpus=2)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        stop()
        pytest.fail("the Serve application did not become ready within 120 s")
    print(f"\nServe app ready in {time.perf_counter() - started:.1f}s at {url}")
    yield url
    stop()


@pytest.fixture
def http(serve_url):
    with httpx.Client(base_url=serve_url, timeout=120) as client:
        yield client
