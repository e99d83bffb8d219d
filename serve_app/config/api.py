"""The HTTP API: request limits, deadlines, upload admission, credentials."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator, model_validator

from serve_app.config.base import Section
from serve_app.errors import ConfigError
from serve_app.schemas import TenantId

Scope = Literal["read", "write", "admin"]
JwtAlgorithm = Literal["HS256", "RS256"]


class LimitsConfig(Section):
    max_document_chars: int = Field(default=5_000_000, ge=1)
    # Every chunk stores its document's title, heading chain, source and metadata again, so
    # they are bounded apart from the text: a 2 MB title on a 2 MB text would be ~4 GB of
    # chunks. Document.repeated_chars() counts them.
    max_repeated_chars: int = Field(default=16_384, ge=1)
    max_documents_per_request: int = Field(default=1000, ge=1)
    # What one upload may cost the encoders, counted after chunking and before any encoding
    # (413 with the counts): a pathological document (deeply nested Markdown quotes, say)
    # can make several times the chunks its size suggests. Each chunk is at most
    # chunker.max_tokens tokens, so these also bound the tokens encoded.
    max_chunks_per_document: int = Field(default=5_000, ge=1)
    max_chunks_per_request: int = Field(default=20_000, ge=1)
    max_file_bytes: int = Field(default=50_000_000, ge=1)  # each uploaded file
    max_pdf_pages: int = Field(default=2000, ge=1)
    # Uploaded files are parsed in loader_workers processes per ingress replica; a file not
    # parsed within loader_timeout_s is refused (400) and its worker killed.
    loader_workers: int = Field(default=2, ge=1)
    loader_timeout_s: float = Field(default=60.0, gt=0)
    # Address space a loader worker may map (RLIMIT_AS): a parser that a hostile file sends
    # into unbounded allocation fails that file (400), not the replica.
    loader_max_memory_bytes: int = Field(default=4 * 1024**3, ge=256 * 1024**2)


class ApiKeyConfig(Section):
    """An API key, stored only as the SHA-256 hex digest of the key."""

    name: str = ""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    tenant_id: TenantId
    # ``admin``: operator reads across tenants (GET /v1/admin/inspect); never a default.
    scopes: list[Scope] = Field(default_factory=lambda: list[Scope](["read", "write"]))


MIN_HS256_SECRET_BYTES = 32  # a key as long as the hash (RFC 7518 section 3.2)


class JwtConfig(Section):
    enabled: bool = False
    algorithms: list[JwtAlgorithm] = Field(default_factory=lambda: list[JwtAlgorithm](["HS256"]))
    secret: str | None = None  # HS256 shared secret; prefer secret_env over a literal
    secret_env: str | None = None  # name of the environment variable holding the secret
    public_key: str | None = None  # RS256 PEM
    tenant_claim: str = "tenant"
    scope_claim: str = "scope"
    # Checked (and required in every token) when set; a cluster config must set both.
    audience: str | None = None
    issuer: str | None = None
    leeway_s: float = Field(default=0.0, ge=0, le=300)  # clock skew allowed on exp/nbf/iat
    # A token may be valid for at most this long from now (a stolen token that never
    # expires is a key): its exp is checked against it.
    max_lifetime_s: float = Field(default=86_400.0, gt=0)

    @model_validator(mode="after")
    def _keys_for_algorithms(self) -> JwtConfig:
        if self.enabled and "HS256" in self.algorithms and not (self.secret or self.secret_env):
            raise ValueError("jwt.secret or jwt.secret_env is required for HS256")
        if self.secret is not None and len(self.secret.encode()) < MIN_HS256_SECRET_BYTES:
            raise ValueError(
                f"jwt.secret must be at least {MIN_HS256_SECRET_BYTES} bytes (RFC 7518 3.2)"
            )
        if self.enabled and "RS256" in self.algorithms and not self.public_key:
            raise ValueError("jwt.public_key is required for RS256")
        return self


class AuthConfig(Section):
    """``required`` (the default) needs a credential; ``none`` serves one anonymous tenant and
    must be set explicitly, on a loopback bind only. Both are checked when the API starts
    (``serve_app.api.auth.check_exposure``), so offline commands load any config."""

    mode: Literal["none", "required"] = "required"
    anonymous_tenant: TenantId = "default"
    api_keys: list[ApiKeyConfig] = Field(default_factory=list)
    jwt: JwtConfig = Field(default_factory=JwtConfig)


class ConnectionBudget(Section):
    """How slowly a client may send a request before it is answered 408 and its connection
    closed. Headers: HAProxy's ``timeout http-request`` in front of the ingress (the HTTP
    servers behind it see no request before its headers are complete). Body: the edge
    middleware (``serve_app.api.edge``) on every HTTP server of the service: each chunk within
    ``body_idle_timeout_s`` of the last, and past the first ``body_rate_grace_s`` seconds at
    least ``body_min_rate_bytes_per_s`` on average (a 50 MB upload at the floor takes 13
    minutes). An answer given before the body was read (a 401, a 413) lingers: the rest of
    the body is read and dropped (each chunk within ``body_idle_timeout_s``) for at most
    ``linger_s`` and ``linger_max_bytes`` before the answer's last byte and the close,
    because closing on unread bytes resets the connection and a client still sending (most
    HTTP libraries send the whole body first) loses the answer."""

    header_timeout_s: float = Field(default=5.0, gt=0)
    body_idle_timeout_s: float = Field(default=10.0, gt=0)
    body_min_rate_bytes_per_s: int = Field(default=65_536, ge=1)
    body_rate_grace_s: float = Field(default=10.0, ge=0)
    linger_s: float = Field(default=5.0, ge=0)
    linger_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    # An idle kept-alive connection is closed after this (Serve's default is 90 s, so idle
    # connections piled up to HAProxy's maxconn), and one client address may hold at most
    # this many connections at once in a local run (HAProxy refuses the rest).
    keep_alive_s: int = Field(default=5, ge=1)
    max_connections_per_client: int = Field(default=256, ge=1)


class TenantLimits(Section):
    """What one tenant may take of each ingress replica (``serve_app.service.tenant_limits``);
    past a limit 429 ``TENANT_LIMIT`` with ``Retry-After``, other tenants untouched. Keep
    ``max_concurrent_answers`` below ``llm.parallel + llm.max_queued`` (times the LLM
    replicas) so that one tenant's burst leaves slots for the others. ``requests_per_s``
    (with ``request_burst``) counts every authenticated request; ``ingest_bytes_per_minute``
    the text of uploaded documents (an upload larger than it waits for a full minute's
    worth); None turns either off. ``max_collections`` is per tenant across the cluster
    (403 ``TENANT_QUOTA`` past it)."""

    max_concurrent_answers: int = Field(default=4, ge=1)
    retry_after_s: float = Field(default=2.0, gt=0)
    requests_per_s: float | None = Field(default=200.0, gt=0)
    request_burst: int = Field(default=400, ge=1)
    ingest_bytes_per_minute: int | None = Field(default=200_000_000, ge=1)
    max_collections: int = Field(default=100, ge=1)


class ApiConfig(Section):
    request_timeout_s: float = Field(default=30.0, gt=0)  # search, reads, deletes
    ingest_timeout_s: float = Field(default=900.0, gt=0)  # a document upload encodes everything
    max_request_bytes: int = Field(default=50_000_000, ge=1024)  # document uploads
    # Every other route that takes a body (search, answer, chat completions, collections):
    # their real bodies are a few KB, and a JSON body is parsed whole on the event loop.
    max_json_bytes: int = Field(default=524_288, ge=1024)
    # Uploads are cut into sub-batches of at most ingest_batch_size documents and
    # ingest_batch_chars characters; ingest_concurrency of them run at once per ingress
    # replica (all uploads together), so chunking, encoding and writing of consecutive
    # sub-batches overlap while the models see a bounded number of document batches.
    ingest_batch_size: int = Field(default=32, ge=1)
    ingest_batch_chars: int = Field(default=200_000, ge=1)
    ingest_concurrency: int = Field(default=2, ge=1)
    # Uploads one ingress replica holds at once (running or waiting for a slot); more are
    # refused with 503 SERVICE_UNAVAILABLE and a retry hint, never queued in the models.
    max_pending_uploads: int = Field(default=32, ge=1)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    connections: ConnectionBudget = Field(default_factory=ConnectionBudget)
    tenants: TenantLimits = Field(default_factory=TenantLimits)
    # The Host names the API answers to (a port is ignored). None: on a loopback bind the
    # loopback names only, elsewhere any; a page on another name rebound to 127.0.0.1 (DNS
    # rebinding) is refused 400 INVALID_HOST.
    allowed_hosts: list[str] | None = None
    # Web origins ("https://app.example.com") whose pages may call the API; a request from
    # a page of any other origin is refused 403 CROSS_ORIGIN. The API's own pages always may.
    allowed_origins: list[str] = Field(default_factory=list)
    # The proxies in front of the service (CIDRs: an ingress controller's, a load balancer's)
    # whose X-Forwarded-For names the client in the access line; from any other address the
    # connection's own address does, whatever the request says. Applied by HAProxy in front
    # of the ingress (local run and chart).
    trusted_proxies: list[str] = Field(default_factory=list)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, proxies: list[str]) -> list[str]:
        return [str(ipaddress.ip_network(p.strip(), strict=False)) for p in proxies]


BODYLESS_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})


def body_limit(api: ApiConfig, method: str, path: str) -> tuple[int, str]:
    """The most body bytes a request may send, and the setting that says so: none for the
    methods whose routes take no body, ``max_request_bytes`` for document uploads,
    ``max_json_bytes`` for every other route."""
    if method.upper() in BODYLESS_METHODS:
        return 0, f"{method.upper()} takes no body"
    if method.upper() == "POST" and path.rstrip("/").endswith("/documents"):
        return api.max_request_bytes, "api.max_request_bytes"
    return api.max_json_bytes, "api.max_json_bytes"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (a bind nothing off this machine reaches)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(auth: AuthConfig, host: str) -> None:
    """ConfigError unless ``auth`` may serve on ``host``: ``none`` only on a loopback bind,
    and JWTs off loopback only with an audience and an issuer. The one place these rules are
    written (the Ray layer's settings and the API's start both call it)."""
    if is_loopback(host):
        return
    if auth.mode == "none":
        raise ConfigError(
            f"api.auth.mode 'none' serves anyone who can reach {host!r}: it is allowed only "
            "on a loopback bind (serve.host 127.0.0.1); configure api_keys or jwt instead"
        )
    if auth.jwt.enabled and not (auth.jwt.audience and auth.jwt.issuer):
        raise ConfigError(
            f"api.auth.jwt.audience and issuer are required when serving on {host!r}: "
            "a token minted for another service must not pass"
        )
