"""What one tenant may hold of an ingress replica at once, so that its burst cannot take
what every other tenant needs (OWASP API4): answers in flight, each holding an LLM slot for
seconds. Past the limit a request is refused 429 ``TENANT_LIMIT`` with ``Retry-After``,
naming the setting; the other tenants' requests are untouched."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from serve_app.errors import TenantLimitError


class TenantSlots:
    """At most ``most`` of one tenant's operations at once (per ingress replica)."""

    def __init__(self, most: int, what: str, setting: str, retry_after_s: float) -> None:
        self.most = most
        self.what = what
        self.setting = setting
        self.retry_after_s = retry_after_s
        self.active: Counter[str] = Counter()

    @contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        if self.active[tenant] >= self.most:
            raise TenantLimitError(
                f"tenant {tenant!r} already has {self.active[tenant]} {self.what} in flight "
                f"on this replica ({self.setting} {self.most}); retry in "
                f"{self.retry_after_s:g}s",
                retry_after_s=self.retry_after_s,
            )
        self.active[tenant] += 1
        try:
            yield
        finally:
            self.active[tenant] -= 1
            if not self.active[tenant]:
                del self.active[tenant]
