"""The identity boundary: every credential yields a principal whose tenant passed one check,
and a scope key is a (tenant, collection) value that no string can forge.

Tenant ``tena`` keeps a document in its ``default`` collection and one in ``proj``. Tokens
whose tenant claim tries to reach them (``tena/proj``, ``tena/*``, NUL, 10 KB, and
arbitrary strings from hypothesis) are refused or confined to their own tenant on every
route: reads, searches, deletes and the collection routes (in-process app, real small
models, the embedded store)."""

from __future__ import annotations

import time

import httpx
import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serve_app.api.app import create_app
from serve_app.api.auth import Authenticator, Principal, UnauthenticatedError
from serve_app.config import AuthConfig
from serve_app.pipelines.components import build_components
from serve_app.schemas import ScopeKey, valid_tenant_id
from serve_app.service import RetrievalService
from serve_app.stores.base import in_scope

on_session_loop = pytest.mark.asyncio(loop_scope="session")

SECRET = "s" * 48
VICTIM = "tena"
ATTACKS = {
    "collection through the tenant": f"{VICTIM}/proj",
    "every collection": f"{VICTIM}/*",
    "NUL": f"{VICTIM}\x00",
    "10 KB": "t" * 10_240,
    "newline": f"{VICTIM}\n",
    "empty": "",
}


def token(tenant: object, scope_claim: str = "read write") -> str:
    claims = {"tenant": tenant, "exp": time.time() + 300, "scope": scope_claim}
    return jwt.encode(claims, SECRET, algorithm="HS256")


def jwt_auth() -> AuthConfig:
    return AuthConfig(jwt={"enabled": True, "secret": SECRET, "tenant_claim": "tenant"})


# -- the principal and the scope key --------------------------------------------------------
@pytest.mark.parametrize("claim", list(ATTACKS.values()), ids=list(ATTACKS))
def test_a_token_whose_tenant_is_no_tenant_id_is_refused(claim):
    with pytest.raises(UnauthenticatedError, match="'tenant' claim"):
        Authenticator(jwt_auth()).authenticate(f"Bearer {token(claim)}", None)


@pytest.mark.parametrize("claim", list(ATTACKS.values()), ids=list(ATTACKS))
def test_no_credential_source_makes_a_principal_of_another_string(claim):
    with pytest.raises(ValueError, match="not a tenant id"):
        Principal(claim, "anyone", frozenset({"read"}))
    with pytest.raises(ValueError):
        AuthConfig(mode="none", anonymous_tenant=claim)
    with pytest.raises(ValueError):
        AuthConfig(api_keys=[{"sha256": "0" * 64, "tenant_id": claim}])


@settings(max_examples=300, deadline=None)
@given(claim=st.one_of(st.text(), st.text(alphabet="tena/*:._-\x00\n ", max_size=12)))
def test_any_claim_yields_its_own_tenant_or_nothing(claim):
    """A signed token names exactly its claim's tenant, or is refused; the scopes its
    principal can build all belong to that tenant, and none is the victim's unless the claim
    is the victim itself."""
    try:
        principal = Authenticator(jwt_auth()).authenticate(f"Bearer {token(claim)}", None)
    except UnauthenticatedError:
        with pytest.raises(ValueError):
            valid_tenant_id(claim)
        return
    assert principal.tenant_id == claim
    for collection in ("default", "proj", None):
        key = principal.scope(collection)
        assert key.tenant == claim
        victims = {ScopeKey(VICTIM), ScopeKey(VICTIM, "proj"), ScopeKey(VICTIM, None)}
        assert (key in victims) == (claim == VICTIM)
        payload = {"tenant_id": VICTIM, "collection": "proj"}
        assert in_scope(payload, key) == (claim == VICTIM and collection in ("proj", None))


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_a_string_is_a_whole_tenant_or_no_scope(text):
    """A tenant id alone makes that tenant's default collection, never split into a tenant
    and a collection (nothing parses a string into a scope)."""
    try:
        key = ScopeKey(text)
    except ValueError:
        return
    assert (key.tenant, key.collection) == (text, "default")


tenants = st.text(alphabet="ab/:._-*", min_size=1, max_size=6)
collections = st.one_of(st.none(), st.text(alphabet="ab_-/", min_size=1, max_size=5))


@settings(max_examples=500, deadline=None)
@given(a=st.tuples(tenants, collections), b=st.tuples(tenants, collections))
def test_distinct_scopes_never_share_a_name(a, b):
    """The text of a scope key (logs, chunk-id owners) names one scope only."""
    try:
        first, second = ScopeKey(*a), ScopeKey(*b)
    except ValueError:
        return
    assert (str(first) == str(second)) == (first == second)


# -- every route, over HTTP -----------------------------------------------------------------
@pytest.fixture(scope="module")
async def api(app_config_factory):
    auth = {"jwt": {"enabled": True, "secret": SECRET, "tenant_claim": "tenant"}}
    config = app_config_factory(api={"auth": auth})
    components = await build_components(config)
    transport = httpx.ASGITransport(app=create_app(RetrievalService(components)))
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as http:
        owner = {"Authorization": f"Bearer {token(VICTIM)}"}
        assert (await http.post("/v1/collections", json={"name": "proj"}, headers=owner)).is_success
        for path, doc in [
            ("/v1/documents", {"id": "plain", "text": "Plasmids spread resistance genes."}),
            ("/v1/collections/proj/documents", {"id": "secret", "text": "Plasmids in proj."}),
        ]:
            written = await http.post(path, json={"documents": [doc]}, headers=owner)
            assert written.status_code == 200, written.text
        yield http
    await components.close()


ROUTES = [
    ("GET", "/v1/documents", None),
    ("GET", "/v1/documents/plain", None),
    ("GET", "/v1/documents/secret", None),
    ("GET", "/v1/search?q=plasmids", None),
    ("POST", "/v1/search", {"query": "plasmids"}),
    ("POST", "/v1/search", {"query": "plasmids", "collection": "proj"}),
    ("GET", "/v1/collections", None),
    ("GET", "/v1/collections/proj", None),
    ("GET", "/v1/collections/proj/documents", None),
    ("GET", "/v1/collections/proj/documents/secret", None),
    ("GET", "/v1/collections/proj/search?q=plasmids", None),
    ("DELETE", "/v1/documents/plain", None),
    ("DELETE", "/v1/collections/proj/documents/secret", None),
    ("DELETE", "/v1/collections/proj", None),
]


async def victim_intact(http: httpx.AsyncClient) -> None:
    owner = {"Authorization": f"Bearer {token(VICTIM)}"}
    for path in ("/v1/documents/plain", "/v1/collections/proj/documents/secret"):
        assert (await http.get(path, headers=owner)).status_code == 200, path


def leaked(response: httpx.Response) -> bool:
    """Whether the answer shows any of the victim's documents or collections."""
    if response.status_code >= 400:
        return False
    body = response.json()
    ids = {r.get("doc_id") for r in body.get("results", [])} | {body.get("id")}
    listed = body.get("documents", [])  # a page's summaries, or a detail's counts by id
    ids |= {d.get("id") for d in listed} if isinstance(listed, list) else set(listed)
    names = {c.get("name") for c in body.get("collections", [])} | {body.get("name")}
    return bool(ids & {"plain", "secret"}) or "proj" in names or body.get("deleted") is not None


async def attack(http: httpx.AsyncClient, claim: str) -> list[tuple[str, str, int]]:
    headers = {"Authorization": f"Bearer {token(claim, 'read write admin')}"}
    answers = []
    for method, path, body in ROUTES:
        response = await http.request(method, path, json=body, headers=headers)
        assert response.status_code < 500, (claim, path, response.text)
        assert not leaked(response), (claim, method, path, response.text)
        answers.append((method, path, response.status_code))
    return answers


@on_session_loop
@pytest.mark.parametrize("name", list(ATTACKS))
async def test_forged_tenant_claims_reach_nothing_on_any_route(api, name):
    answers = await attack(api, ATTACKS[name])
    assert {status for _, _, status in answers} == {401}
    await victim_intact(api)


@on_session_loop
async def test_another_tenant_sees_none_of_the_victims_data(api):
    answers = await attack(api, "tenb")
    assert all(status in (200, 404) for _, _, status in answers)
    await victim_intact(api)


@on_session_loop
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(claim=st.one_of(st.text(max_size=40), st.sampled_from(list(ATTACKS.values()))))
async def test_any_claim_reaches_none_of_another_tenants_data(api, claim):
    """hypothesis over the claim, every route: a token either fails to authenticate (401) or
    acts for exactly its own tenant; the victim's documents stay unseen and undeleted."""
    if claim == VICTIM:
        return
    await attack(api, claim)
    await victim_intact(api)
