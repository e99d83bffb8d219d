"""What one tenant may take of an ingress replica, so that its burst cannot take what every
other tenant needs (OWASP API4): answers in flight at once (each holds an LLM slot for
seconds), requests per second and uploaded text per minute. Past a limit a request is refused
429 ``TENANT_LIMIT`` with ``Retry-After``, naming the setting; the other tenants' requests are
untouched."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from serve_app.config.api import TenantLimits
from serve_app.errors import TenantLimitError
from serve_app.schemas import Document


class TenantSlots:
    """At most ``most`` of one tenant's operations at once (per ingress replica)."""

    def __init__(self, most: int, what: str, setting: str, retry_after_s: float) -> None:
        self.most = most
        self.what = what
        self.setting = setting
        self.retry_after_s = retry_after_s
        self.active: Counter[str] = Counter()

    def take(self, tenant: str) -> None:
        """One more of ``tenant``'s operations, or TenantLimitError; ``give`` ends it."""
        if self.active[tenant] >= self.most:
            raise TenantLimitError(
                f"tenant {tenant!r} already has {self.active[tenant]} {self.what} in flight "
                f"on this replica ({self.setting} {self.most}); retry in "
                f"{self.retry_after_s:g}s",
                retry_after_s=self.retry_after_s,
            )
        self.active[tenant] += 1

    def give(self, tenant: str) -> None:
        self.active[tenant] -= 1
        if not self.active[tenant]:
            del self.active[tenant]

    @contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        self.take(tenant)
        try:
            yield
        finally:
            self.give(tenant)


class TenantRate:
    """A token bucket per tenant: ``burst`` units at most, refilled at ``per_s`` units a
    second (per ingress replica). ``take`` spends units or refuses with the wait until they
    would be there. Idle tenants' buckets (full again) are forgotten past ``max_tenants``,
    so the table stays bounded whatever tenants a token issuer names."""

    def __init__(
        self,
        per_s: float,
        burst: float,
        what: str,
        setting: str,
        clock: Callable[[], float] = time.monotonic,
        max_tenants: int = 10_000,
    ) -> None:
        self.per_s = per_s
        self.burst = burst
        self.what = what
        self.setting = setting
        self.clock = clock
        self.max_tenants = max_tenants
        self.buckets: dict[str, tuple[float, float]] = {}  # tenant -> (units, at)

    def _units(self, tenant: str, now: float) -> float:
        units, at = self.buckets.get(tenant, (self.burst, now))
        return min(self.burst, units + (now - at) * self.per_s)

    def take(self, tenant: str, amount: float = 1.0) -> None:
        now = self.clock()
        units = self._units(tenant, now)
        # More than a full bucket can never pass: charge what the bucket holds at most, so a
        # single large request waits for a full bucket instead of being refused forever.
        amount = min(amount, self.burst)
        if units < amount:
            wait = (amount - units) / self.per_s
            raise TenantLimitError(
                f"tenant {tenant!r} is past its {self.what} on this replica ({self.setting}); "
                f"retry in {wait:.3g}s",
                retry_after_s=wait,
            )
        if tenant not in self.buckets and len(self.buckets) >= self.max_tenants:
            self._forget_idle(now)
        self.buckets[tenant] = (units - amount, now)

    def _forget_idle(self, now: float) -> None:
        for tenant in [t for t in self.buckets if self._units(t, now) >= self.burst]:
            del self.buckets[tenant]


class TenantRates:
    """One API's rates per tenant (``api.tenants``; per ingress replica): every
    authenticated request, and the text bytes of uploaded documents."""

    def __init__(self, limits: TenantLimits, clock: Callable[[], float] = time.monotonic):
        self.requests = None
        self.ingest_bytes = None
        if limits.requests_per_s is not None:
            self.requests = TenantRate(
                limits.requests_per_s,
                limits.request_burst,
                "requests per second",
                "api.tenants.requests_per_s",
                clock,
            )
        if limits.ingest_bytes_per_minute is not None:
            per_minute = limits.ingest_bytes_per_minute
            self.ingest_bytes = TenantRate(
                per_minute / 60,
                per_minute,
                "uploaded text per minute",
                "api.tenants.ingest_bytes_per_minute",
                clock,
            )

    def request(self, tenant: str) -> None:
        if self.requests is not None:
            self.requests.take(tenant)

    def upload(self, tenant: str, documents: list[Document]) -> None:
        if self.ingest_bytes is not None:
            self.ingest_bytes.take(tenant, sum(d.text_bytes() for d in documents))
