"""Per-tenant request rate limiting (429), in the API process.

A token bucket per tenant: ``rate`` requests per second on average and up to ``burst`` at once. It lives in
the process, so with N API replicas a tenant gets N times the rate; a proxy or gateway in front is the place
for a cluster-wide limit. Off unless ``OM_RATE_LIMIT`` is set.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class TenantRateLimiter:
    def __init__(self, rate: float, burst: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError(f"the rate limit must be positive, got {rate}")
        self.rate = rate
        # an unset burst allows two seconds' worth, and always at least one request
        self.burst = burst if burst > 0 else max(1, math.ceil(2 * rate))
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def admit(self, tenant: str) -> float | None:
        """None when the request may go ahead (and is counted); else the seconds until it could."""
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(tenant, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[tenant] = (tokens - 1.0, now)
                return None
            self._buckets[tenant] = (tokens, now)
        return (1.0 - tokens) / self.rate
