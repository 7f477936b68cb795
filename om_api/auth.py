"""Bearer keys mapped to tenants.

Keys come from ``OM_API_KEYS`` (simple deployments) or from ``om_api_keys`` (``om keys create``), where only
their SHA-256 is stored: a leaked table gives no usable key. Keys are long random strings, so an unsalted
hash is enough (no dictionary to attack); comparisons are constant-time. A key found in the table is
cached for a minute so the hot path does not pay a query per request.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, Request

from om_api.errors import ApiError
from om_api.rate_limit import TenantRateLimiter
from om_core.application.ports import ApiKeys

KEY_PREFIX = "om_"
DEV_TENANT = "default"
_CACHE_SECONDS = 60.0
_TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def valid_tenant(tenant: str) -> bool:
    import re

    return re.fullmatch(_TENANT_PATTERN, tenant) is not None


def create_key(keys: ApiKeys, tenant: str, label: str | None = None) -> str:
    """Store a new key for ``tenant`` and return it; it is shown once and never stored in clear."""
    if not valid_tenant(tenant):
        raise ValueError(f"tenant {tenant!r} must match {_TENANT_PATTERN}")
    key = new_key()
    keys.add_key(hash_key(key), tenant, label)
    return key


class KeyRing:
    """Resolves a presented key to its tenant."""

    def __init__(self, env_keys: Mapping[str, str], stored: ApiKeys) -> None:
        self._env = {hash_key(k): t for k, t in env_keys.items()}
        self._stored = stored
        self._cache: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def tenant_for(self, key: str) -> str | None:
        digest = hash_key(key)
        found: str | None = None
        for known, tenant in self._env.items():
            if hmac.compare_digest(known, digest):
                found = tenant
        if found is not None:
            return found
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        stored = self._stored.tenant_of_key(digest)
        if stored is None:
            return None
        with self._lock:
            self._cache[digest] = (stored, now + _CACHE_SECONDS)
        return stored


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def current_tenant(request: Request) -> str:
    """The tenant of the request's bearer key (``default`` when auth is disabled on loopback), once it is
    within its rate limit."""
    tenant = _authenticated_tenant(request)
    limiter: TenantRateLimiter | None = request.app.state.rate_limiter
    if limiter is not None:
        wait = limiter.admit(tenant)
        if wait is not None:
            raise ApiError(
                429,
                "rate_limited",
                f"over the limit of {limiter.rate:g} requests per second for this tenant; retry later",
                {"retry_after_s": round(wait, 3)},
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
    return tenant


def _authenticated_tenant(request: Request) -> str:
    state = request.app.state
    if not state.settings.auth_enabled:
        return DEV_TENANT
    header = request.headers.get("authorization")
    if not header:
        raise _unauthorized("missing Authorization: Bearer <key>")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise _unauthorized("the Authorization header must be 'Bearer <key>'")
    tenant = state.keyring.tenant_for(key.strip())
    if tenant is None:
        raise _unauthorized("unknown API key")
    return str(tenant)


Tenant = Annotated[str, Depends(current_tenant)]
