"""Credentials -> tenant. API keys are compared by SHA-256 digest; JWTs are verified (HS256 or
RS256) and carry the tenant in a claim. The tenant never comes from the request body."""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from dataclasses import dataclass

import jwt

from serve_app.config import AuthConfig, check_bind, is_loopback
from serve_app.config.api import MIN_HS256_SECRET_BYTES
from serve_app.errors import ConfigError, ForbiddenError, UnauthenticatedError
from serve_app.schemas import DEFAULT_COLLECTION, ScopeKey, valid_tenant_id

__all__ = [
    "Authenticator",
    "ForbiddenError",
    "Principal",
    "UnauthenticatedError",
    "check_exposure",
    "hash_api_key",
    "is_loopback",
]

DEFAULT_JWT_SCOPES = frozenset({"read"})
"""Scopes of a token without a scope claim: reading only; writing must be granted."""


MAX_SUBJECT_CHARS = 128


@dataclass(frozen=True)
class Principal:
    """Who a request acts for (``subject``: ``key:<name>``, ``jwt:<sub>`` or ``anonymous``).
    Every credential source (API key, JWT, the anonymous local tenant) makes one here, so
    every tenant passes the same check (``valid_tenant_id``): ValueError for any other
    string."""

    tenant_id: str
    subject: str
    scopes: frozenset[str]

    def __post_init__(self) -> None:
        valid_tenant_id(self.tenant_id)

    def scope(self, collection: str | None = DEFAULT_COLLECTION) -> ScopeKey:
        """The scope key of one of this principal's collections (None: all of them)."""
        return ScopeKey(self.tenant_id, collection)

    def require(self, scope: str) -> None:
        if scope not in self.scopes:
            raise ForbiddenError(f"this credential lacks the '{scope}' scope")


def hash_api_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def check_exposure(config: AuthConfig, host: str | None) -> None:
    """ConfigError unless the API can be served with ``config`` on ``host``: ``required``
    (the default) needs API keys or JWT, and the bind rules hold (``check_bind``)."""
    if config.mode == "required" and not config.api_keys and not config.jwt.enabled:
        raise ConfigError(
            "api.auth.mode is 'required' (the default) but there are no api_keys and jwt is "
            "disabled; configure a credential, or set api.auth.mode: none explicitly for a "
            "service bound to 127.0.0.1"
        )
    if host is not None:
        check_bind(config, host)


class Authenticator:
    def __init__(self, config: AuthConfig, host: str | None = None) -> None:
        check_exposure(config, host)
        self.config = config
        self._hs_secret = config.jwt.secret
        if config.jwt.enabled and config.jwt.secret_env:
            self._hs_secret = os.environ.get(config.jwt.secret_env) or None
            if "HS256" in config.jwt.algorithms and not self._hs_secret:
                raise ConfigError(
                    f"api.auth.jwt.secret_env names {config.jwt.secret_env!r}, which is not set"
                )
            if self._hs_secret and len(self._hs_secret.encode()) < MIN_HS256_SECRET_BYTES:
                raise ConfigError(
                    f"the secret in ${config.jwt.secret_env} is shorter than "
                    f"{MIN_HS256_SECRET_BYTES} bytes (RFC 7518 3.2): a short HS256 key is "
                    "guessed offline from any token"
                )

    def authenticate(self, authorization: str | None, api_key: str | None) -> Principal:
        """The principal for the request's credentials, or UnauthenticatedError."""
        if self.config.mode == "none":
            # Loopback only (check_exposure): the local operator is its own admin.
            return Principal(
                self.config.anonymous_tenant, "anonymous", frozenset({"read", "write", "admin"})
            )
        token = None
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise UnauthenticatedError("Authorization must be 'Bearer <token>'")
            token = value.strip()
        if api_key:
            return self._api_key(api_key)
        if token is None:
            raise UnauthenticatedError(
                "missing credentials: send X-API-Key or Authorization: Bearer"
            )
        if token.count(".") == 2 and self.config.jwt.enabled:
            return self._jwt(token)
        return self._api_key(token)

    def _api_key(self, key: str) -> Principal:
        digest = hash_api_key(key)
        for entry in self.config.api_keys:
            if hmac.compare_digest(digest, entry.sha256):
                name = entry.name or entry.sha256[:12]  # unnamed keys stay apart in the log
                return Principal(entry.tenant_id, f"key:{name}", frozenset(entry.scopes))
        raise UnauthenticatedError("invalid API key")

    def _jwt(self, token: str) -> Principal:
        settings = self.config.jwt
        try:
            header = jwt.get_unverified_header(token)
            algorithm = header.get("alg")
            if algorithm not in settings.algorithms:
                raise UnauthenticatedError(f"token algorithm {algorithm!r} is not accepted")
            key = self._hs_secret if algorithm == "HS256" else settings.public_key
            if key is None:  # the configuration check refuses this; never decode without one
                raise UnauthenticatedError(f"no key is configured for {algorithm}")
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=settings.audience,
                issuer=settings.issuer,
                options={
                    "require": ["exp"]
                    + (["aud"] if settings.audience else [])
                    + (["iss"] if settings.issuer else []),
                    "verify_aud": settings.audience is not None,
                },
                leeway=settings.leeway_s,
            )
        except jwt.ExpiredSignatureError:
            raise UnauthenticatedError("token expired") from None
        except jwt.PyJWTError as error:
            raise UnauthenticatedError(f"invalid token: {error}") from None
        expires = claims.get("exp")
        if isinstance(expires, int | float) and expires - time.time() > settings.max_lifetime_s:
            raise UnauthenticatedError(
                f"token valid for longer than {settings.max_lifetime_s:g} s "
                "(api.auth.jwt.max_lifetime_s)"
            )
        tenant = claims.get(settings.tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            raise UnauthenticatedError(f"token has no '{settings.tenant_claim}' claim")
        raw_scopes = claims.get(settings.scope_claim)
        if raw_scopes is None:
            scopes = DEFAULT_JWT_SCOPES
        elif isinstance(raw_scopes, str):
            scopes = frozenset(raw_scopes.split())
        elif isinstance(raw_scopes, list) and all(isinstance(s, str) for s in raw_scopes):
            scopes = frozenset(raw_scopes)
        else:
            raise UnauthenticatedError(f"token claim '{settings.scope_claim}' is not a scope list")
        try:
            # Prefixed, so a token's subject can never read as an API key's name; bounded.
            subject = f"jwt:{str(claims.get('sub', ''))[:MAX_SUBJECT_CHARS]}"
            return Principal(tenant, subject, scopes)
        except ValueError as error:
            raise UnauthenticatedError(
                f"token's '{settings.tenant_claim}' claim is {error}"
            ) from None
