"""``BrowserRules`` case by case: which Host and Origin a request may carry (the browser
itself is in ``test_browser_attacks.py``)."""

from __future__ import annotations

import pytest

from serve_app.api.browser import BrowserRules, host_name
from serve_app.errors import CrossOriginError, InvalidHostError

LOCAL = BrowserRules(None, [], "127.0.0.1")
CLUSTER = BrowserRules(None, ["https://app.example.com"], "0.0.0.0")


@pytest.mark.parametrize(
    "host,name",
    [("localhost:8500", "localhost"), ("[::1]:8500", "::1"), ("::1", "::1"), ("A.B", "a.b")],
)
def test_host_name_drops_the_port(host, name):
    assert host_name(host) == name


@pytest.mark.parametrize(
    "rules,method,host,origin,site,refused",
    [
        (LOCAL, "POST", "127.0.0.1:8500", None, None, None),  # curl, the SDKs, the CLI
        (LOCAL, "POST", "localhost:8500", "http://localhost:8500", "same-origin", None),
        (LOCAL, "POST", "[::1]:8500", None, None, None),
        (LOCAL, "GET", "rebound.test:8500", None, None, InvalidHostError),
        (LOCAL, "POST", "127.0.0.1:8500", "http://127.0.0.1:3000", "same-site", CrossOriginError),
        (LOCAL, "POST", "127.0.0.1:8500", "null", "cross-site", CrossOriginError),
        (LOCAL, "GET", "127.0.0.1:8500", "https://evil.example", "cross-site", CrossOriginError),
        (LOCAL, "POST", "127.0.0.1:8500", None, "cross-site", CrossOriginError),
        (LOCAL, "GET", "127.0.0.1:8500", None, "cross-site", None),  # a link to /docs
        (CLUSTER, "POST", "rag.example.com", "https://rag.example.com", "same-origin", None),
        (CLUSTER, "POST", "rag.internal", "https://app.example.com/", "cross-site", None),
        (CLUSTER, "POST", "rag.internal", "https://evil.example", "cross-site", CrossOriginError),
        (CLUSTER, "GET", "anything.example", None, None, None),  # no Host rule off loopback
        (BrowserRules(["rag.example.com"], [], "0.0.0.0"), "GET", "x.example", None, None,
         InvalidHostError),
        (BrowserRules(["*"], ["*"], "127.0.0.1"), "POST", "x.example", "https://y", None, None),
    ],
)  # fmt: skip
def test_the_rules(rules, method, host, origin, site, refused):
    if refused is None:
        rules.check(method, host, origin, site)
    else:
        with pytest.raises(refused):
            rules.check(method, host, origin, site)
