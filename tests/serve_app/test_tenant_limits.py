"""The per-tenant token bucket (``serve_app.service.tenant_limits.TenantRate``) on a clock the
test moves: the burst, the refill, the wait it names, one tenant's bucket apart from
another's, an upload larger than the bucket, and a table that stays bounded."""

import pytest

from serve_app.errors import TenantLimitError
from serve_app.service.tenant_limits import TenantRate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_refill_rate_with_the_wait_named():
    clock = Clock()
    rate = TenantRate(2.0, 3, "requests per second", "api.tenants.requests_per_s", clock)
    for _ in range(3):
        rate.take("a")
    with pytest.raises(TenantLimitError) as refused:
        rate.take("a")
    assert refused.value.retry_after_s == pytest.approx(0.5)
    assert "api.tenants.requests_per_s" in refused.value.message
    rate.take("b")  # another tenant's bucket is full
    clock.now += 0.5
    rate.take("a")
    with pytest.raises(TenantLimitError):
        rate.take("a")
    clock.now += 60  # a bucket refills to its burst, no further
    for _ in range(3):
        rate.take("a")
    with pytest.raises(TenantLimitError):
        rate.take("a")


def test_more_than_a_bucket_waits_for_a_full_one_instead_of_never_passing():
    clock = Clock()
    rate = TenantRate(100.0, 6000, "uploaded text per minute", "x", clock)
    rate.take("a", 5000)
    with pytest.raises(TenantLimitError) as refused:
        rate.take("a", 50_000)
    assert refused.value.retry_after_s == pytest.approx(50.0)
    clock.now += 50
    rate.take("a", 50_000)


def test_idle_tenants_are_forgotten_past_the_tables_bound():
    clock = Clock()
    rate = TenantRate(1.0, 1, "requests per second", "x", clock, max_tenants=3)
    for tenant in "abc":
        rate.take(tenant)
    clock.now += 5  # a, b and c are full again
    rate.take("d")
    assert set(rate.buckets) == {"d"}
    rate.take("e")
    with pytest.raises(TenantLimitError):
        rate.take("d")  # a busy tenant is never forgotten into a fresh bucket
