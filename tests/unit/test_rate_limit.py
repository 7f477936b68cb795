"""The per-tenant token bucket behind 429."""

from __future__ import annotations

import pytest

from om_api.rate_limit import TenantRateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_through_then_the_rate_holds() -> None:
    clock = Clock()
    limiter = TenantRateLimiter(2.0, burst=3, clock=clock)
    assert [limiter.admit("a") for _ in range(3)] == [None, None, None]
    wait = limiter.admit("a")
    assert wait == pytest.approx(0.5)
    clock.now += 0.5
    assert limiter.admit("a") is None
    assert limiter.admit("a") == pytest.approx(0.5)


def test_tenants_have_their_own_buckets() -> None:
    clock = Clock()
    limiter = TenantRateLimiter(1.0, burst=1, clock=clock)
    assert limiter.admit("a") is None and limiter.admit("a") is not None
    assert limiter.admit("b") is None


def test_an_idle_tenant_refills_only_up_to_the_burst() -> None:
    clock = Clock()
    limiter = TenantRateLimiter(10.0, burst=2, clock=clock)
    limiter.admit("a")
    clock.now += 3600
    assert limiter.admit("a") is None and limiter.admit("a") is None
    assert limiter.admit("a") is not None


def test_the_default_burst_is_two_seconds_worth_and_at_least_one() -> None:
    assert TenantRateLimiter(5.0).burst == 10
    assert TenantRateLimiter(0.1).burst == 1
    with pytest.raises(ValueError, match="positive"):
        TenantRateLimiter(0)
