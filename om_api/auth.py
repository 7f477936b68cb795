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
from starlette.concurrency import run_in_threadpool

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
        known = self.known_tenant(key)
        if known is not None:
            return known
        digest = hash_key(key)
        stored = self._stored.tenant_of_key(digest)
        if stored is None:
            return None
        with self._lock:
            self._cache[digest] = (stored, time.monotonic() + _CACHE_SECONDS)
        return stored

    def known_tenant(self, key: str) -> str | None:
        """The key's tenant when this process knows it (``OM_API_KEYS``, or found in the store within the
        minute): no store read."""
        digest = hash_key(key)
        found: str | None = None
        for known, tenant in self._env.items():
            if hmac.compare_digest(known, digest):
                found = tenant
        if found is not None:
            return found
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        return None


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


async def current_tenant(request: Request) -> str:
    """The tenant of the request's bearer key (``default`` when auth is disabled on loopback), once it is
    within its rate limit.

    A coroutine, so FastAPI runs it on the event loop: a key this process knows costs a hash, less than
    the hop to a worker thread (and back) that a plain function dependency takes. Only a key it has to
    look up in the store goes to the thread pool.
    """
    key = _presented_key(request)
    if key is None:
        tenant = DEV_TENANT
    else:
        keyring: KeyRing = request.app.state.keyring
        found = keyring.known_tenant(key) or await run_in_threadpool(keyring.tenant_for, key)
        if found is None:
            raise _unauthorized("unknown API key")
        tenant = found
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
    key = _presented_key(request)
    if key is None:
        return DEV_TENANT
    tenant = request.app.state.keyring.tenant_for(key)
    if tenant is None:
        raise _unauthorized("unknown API key")
    return str(tenant)


def _presented_key(request: Request) -> str | None:
    """The request's bearer key; None when auth is disabled."""
    if not request.app.state.settings.auth_enabled:
        return None
    header = request.headers.get("authorization")
    if not header:
        raise _unauthorized("missing Authorization: Bearer <key>")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise _unauthorized("the Authorization header must be 'Bearer <key>'")
    return key.strip()


Tenant = Annotated[str, Depends(current_tenant)]


def caller_of(request: Request) -> str:
    """Who made a request, for the record of a change: the tenant and a fingerprint of its key (never the
    key), or the tenant alone when auth is disabled."""
    tenant = _authenticated_tenant(request)
    _, _, key = (request.headers.get("authorization") or "").partition(" ")
    if not request.app.state.settings.auth_enabled or not key.strip():
        return tenant
    return f"{tenant} (key {hash_key(key.strip())[:12]})"


Caller = Annotated[str, Depends(caller_of)]
