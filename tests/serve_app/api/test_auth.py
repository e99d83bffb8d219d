import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from serve_app.api.auth import Authenticator, ForbiddenError, UnauthenticatedError, hash_api_key
from serve_app.config import AuthConfig
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


def test_required_mode_needs_a_credential_source():
    with pytest.raises(ValueError, match="no api_keys"):
        AuthConfig(mode="required")
