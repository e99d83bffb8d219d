import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from deployments.settings import service_config
from serve_app.api.auth import Authenticator, ForbiddenError, UnauthenticatedError, hash_api_key
from serve_app.config import AuthConfig, config_from_dict
from serve_app.errors import ConfigError


def rsa_pair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def test_none_mode_is_one_anonymous_tenant():
    principal = Authenticator(AuthConfig(mode="none", anonymous_tenant="local")).authenticate(
        None, None
    )
    assert principal.tenant_id == "local" and "write" in principal.scopes


def test_api_keys_by_digest_with_scopes():
    config = AuthConfig(
        api_keys=[
            {"sha256": hash_api_key("k1"), "tenant_id": "t1"},
            {"sha256": hash_api_key("k2"), "tenant_id": "t2", "scopes": ["read"]},
        ]
    )
    auth = Authenticator(config)
    assert auth.authenticate(None, "k1").tenant_id == "t1"
    assert auth.authenticate("Bearer k1", None).tenant_id == "t1"
    reader = auth.authenticate(None, "k2")
    reader.require("read")
    with pytest.raises(ForbiddenError):
        reader.require("write")
    for bad in [(None, None), (None, "k3"), ("Basic abc", None), ("Bearer ", None)]:
        with pytest.raises(UnauthenticatedError):
            auth.authenticate(*bad)


def test_rs256_tokens_and_tenant_claim():
    private, public = rsa_pair()
    auth = Authenticator(
        AuthConfig(
            jwt={
                "enabled": True,
                "algorithms": ["RS256"],
                "public_key": public,
                "tenant_claim": "org",
            }
        )
    )
    token = jwt.encode(
        {"org": "acme", "exp": time.time() + 60, "scope": "read"}, private, algorithm="RS256"
    )
    principal = auth.authenticate(f"Bearer {token}", None)
    assert principal.tenant_id == "acme" and principal.scopes == frozenset({"read"})
    no_tenant = jwt.encode({"exp": time.time() + 60}, private, algorithm="RS256")
    with pytest.raises(UnauthenticatedError, match="org"):
        auth.authenticate(f"Bearer {no_tenant}", None)
    hs = jwt.encode({"org": "acme", "exp": time.time() + 60}, "x" * 40, algorithm="HS256")
    with pytest.raises(UnauthenticatedError, match="not accepted"):
        auth.authenticate(f"Bearer {hs}", None)
    no_exp = jwt.encode({"org": "acme"}, private, algorithm="RS256")
    with pytest.raises(UnauthenticatedError):
        auth.authenticate(f"Bearer {no_exp}", None)


def test_secret_from_environment(monkeypatch):
    config = AuthConfig(jwt={"enabled": True, "secret_env": "TEST_JWT_SECRET"})
    with pytest.raises(ConfigError, match="TEST_JWT_SECRET"):
        Authenticator(config)
    monkeypatch.setenv("TEST_JWT_SECRET", "s" * 40)
    token = jwt.encode({"tenant": "t", "exp": time.time() + 60}, "s" * 40, algorithm="HS256")
    assert Authenticator(config).authenticate(f"Bearer {token}", None).tenant_id == "t"


def test_auth_is_required_unless_none_is_said_explicitly():
    assert AuthConfig().mode == "required"
    assert config_from_dict({}).api.auth.mode == "required"  # no api.auth section at all
    # Offline commands still load such a config; serving it is refused at start.
    with pytest.raises(ConfigError, match="no api_keys"):
        Authenticator(AuthConfig(), host="127.0.0.1")
    with pytest.raises(ConfigError, match="no api_keys"):
        Authenticator(AuthConfig(mode="required"))


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "example.org"])
def test_mode_none_is_refused_on_a_non_loopback_bind(host):
    with pytest.raises(ConfigError, match="loopback"):
        Authenticator(AuthConfig(mode="none"), host=host)
    with pytest.raises(ConfigError, match="loopback"):
        service_config(
            config_from_dict({"api": {"auth": {"mode": "none"}}, "serve": {"host": host}})
        )


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_mode_none_on_loopback_serves_one_anonymous_tenant(host):
    config = config_from_dict({"api": {"auth": {"mode": "none"}}, "serve": {"host": host}})
    principal = Authenticator(config.api.auth, host=host).authenticate(None, None)
    assert principal.tenant_id == "default"


def test_cluster_config_requires_audience_and_issuer():
    jwt_on = {"enabled": True, "secret": "s" * 40}
    with pytest.raises(ConfigError, match="audience and issuer"):
        service_config(
            config_from_dict({"api": {"auth": {"jwt": jwt_on}}, "serve": {"host": "0.0.0.0"}})
        )
    with pytest.raises(ConfigError, match="audience and issuer"):
        service_config(
            config_from_dict(
                {
                    "api": {"auth": {"jwt": {**jwt_on, "audience": "a"}}},
                    "serve": {"host": "0.0.0.0"},
                }
            )
        )
    full = {**jwt_on, "audience": "a", "issuer": "i"}
    service_config(config_from_dict({"api": {"auth": {"jwt": full}}, "serve": {"host": "0.0.0.0"}}))
    # Loopback (a developer's machine) may leave them out.
    service_config(
        config_from_dict({"api": {"auth": {"jwt": jwt_on}}, "serve": {"host": "127.0.0.1"}})
    )


def _hs_auth(**jwt_settings) -> Authenticator:
    return Authenticator(
        AuthConfig(jwt={"enabled": True, "secret": "k" * 40, **jwt_settings}), host="127.0.0.1"
    )


def _token(claims: dict) -> str:
    return "Bearer " + jwt.encode({"tenant": "t", "exp": time.time() + 60, **claims}, "k" * 40)


def test_jwt_without_scope_claim_reads_only():
    principal = _hs_auth().authenticate(_token({}), None)
    assert principal.scopes == frozenset({"read"})
    with pytest.raises(ForbiddenError):
        principal.require("write")
    assert _hs_auth().authenticate(_token({"scope": ["read", "write"]}), None).scopes == {
        "read",
        "write",
    }
    with pytest.raises(UnauthenticatedError, match="scope"):
        _hs_auth().authenticate(_token({"scope": 7}), None)


def test_jwt_not_before():
    auth = _hs_auth()
    with pytest.raises(UnauthenticatedError, match="not yet valid"):
        auth.authenticate(_token({"nbf": time.time() + 600}), None)
    assert auth.authenticate(_token({"nbf": time.time() - 1}), None).tenant_id == "t"
    # A small configured leeway absorbs clock skew, no more.
    lenient = _hs_auth(leeway_s=30)
    assert lenient.authenticate(_token({"nbf": time.time() + 10}), None).tenant_id == "t"
    with pytest.raises(UnauthenticatedError):
        lenient.authenticate(_token({"nbf": time.time() + 600}), None)


def test_jwt_audience_and_issuer():
    auth = _hs_auth(audience="serve-app", issuer="https://issuer.example")
    good = {"aud": "serve-app", "iss": "https://issuer.example"}
    assert auth.authenticate(_token(good), None).tenant_id == "t"
    for claims, reason in [
        ({**good, "aud": "other-service"}, "audience"),
        ({"iss": good["iss"]}, "aud"),  # missing aud
        ({**good, "iss": "https://evil.example"}, "issuer"),
        ({"aud": good["aud"]}, "iss"),  # missing iss
    ]:
        with pytest.raises(UnauthenticatedError, match=f"(?i){reason}"):
            auth.authenticate(_token(claims), None)


def test_principals_are_logged_unambiguously():
    """Unnamed keys were all ``api-key`` in the access log, and a token whose ``sub`` was a
    key's name read as that key; a ``sub`` was unbounded."""
    keys = AuthConfig(
        api_keys=[
            {"sha256": hash_api_key("k1"), "tenant_id": "t1"},
            {"sha256": hash_api_key("k2"), "tenant_id": "t1"},
            {"name": "ops", "sha256": hash_api_key("k3"), "tenant_id": "t1"},
        ]
    )
    auth = Authenticator(keys)
    first, second = (auth.authenticate(None, k).subject for k in ("k1", "k2"))
    assert first != second and first.startswith("key:") and second.startswith("key:")
    assert auth.authenticate(None, "k3").subject == "key:ops"
    assert _hs_auth().authenticate(_token({"sub": "ops"}), None).subject == "jwt:ops"
    long = _hs_auth().authenticate(_token({"sub": "x" * 5000}), None).subject
    assert long == "jwt:" + "x" * 128


def test_a_short_hs256_secret_and_a_token_valid_for_too_long_are_refused(monkeypatch):
    with pytest.raises(ValueError, match="at least 32 bytes"):
        AuthConfig(jwt={"enabled": True, "secret": "short-secret"})
    monkeypatch.setenv("SHORT_JWT_SECRET", "s" * 16)
    with pytest.raises(ConfigError, match="shorter than 32 bytes"):
        Authenticator(AuthConfig(jwt={"enabled": True, "secret_env": "SHORT_JWT_SECRET"}))
    forever = "Bearer " + jwt.encode(
        {"tenant": "t", "exp": time.time() + 10 * 365 * 86400}, "k" * 40
    )
    with pytest.raises(UnauthenticatedError, match="max_lifetime_s"):
        _hs_auth().authenticate(forever, None)
    assert _hs_auth(max_lifetime_s=20 * 365 * 86400).authenticate(forever, None).tenant_id == "t"
