"""A real OpenSearch-REST server (osmem-server) for the store tests, one per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def opensearch_url():
    from osmem_server import OsmemServer

    server = OsmemServer.start(startup_timeout=30)
    try:
        yield server.url
    finally:
        server.close()
