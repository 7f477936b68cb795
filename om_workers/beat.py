"""What beat's periodic tasks do: the outbox relay, the idle-TTL sweep and stuck-cycle recovery.

Every scan runs under a Postgres advisory lock taken with ``pg_try_advisory_lock``: if two beats were ever
started, or a scan outlives its interval, the second scanner skips instead of doing the work twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import sqlalchemy as sa

from om_core.adapters.store.sql_store import SqlEventStore
from om_core.application.deps import Deps
from om_core.application.maintenance import recover_stuck_cycles, sweep_idle
from om_core.application.ports import EventStore, StoreUnavailableError
from om_workers import metrics

log = logging.getLogger(__name__)

# Advisory lock keys: arbitrary constants, unique to om ("om" in ASCII, then the scan number).
LOCK_RELAY = 0x6F6D_0001
LOCK_SWEEP = 0x6F6D_0002
_LOCAL_LOCKS: dict[int, threading.Lock] = {LOCK_RELAY: threading.Lock(), LOCK_SWEEP: threading.Lock()}


def _sql_store(store: EventStore) -> SqlEventStore | None:
    inner = getattr(store, "inner", store)
    return inner if isinstance(inner, SqlEventStore) else None


@contextmanager
def scan_lock(store: EventStore, key: int) -> Iterator[bool]:
    """Yields whether this process holds the scan's lock; never waits for it."""
    sql = _sql_store(store)
    if sql is None or sql.engine.dialect.name != "postgresql":
        # embedded SQLite: one process, so a process-wide lock is the whole story
        lock = _LOCAL_LOCKS[key]
        got = lock.acquire(blocking=False)
        try:
            yield got
        finally:
            if got:
                lock.release()
        return
    # a session-level lock lives as long as this connection holds it, across the scan's own transactions
    with sql.engine.connect() as conn:
        got = bool(conn.scalar(sa.text("SELECT pg_try_advisory_lock(:key)"), {"key": key}))
        conn.commit()
        try:
            yield got
        finally:
            if got:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                conn.commit()


@dataclass
class SweepReport:
    locked: bool = True
    scanned: int = 0
    activated: list[str] = field(default_factory=list)
    recovered: dict[str, list[str]] = field(default_factory=dict)
    errors: int = 0


def sweep(deps: Deps, *, stuck_after: timedelta, page: int = 500) -> SweepReport:
    """Idle-TTL sweep and stuck-cycle recovery over every record with pending work."""
    report = SweepReport()
    with scan_lock(deps.store, LOCK_SWEEP) as locked:
        if not locked:
            metrics.MAINTENANCE.labels(scan="sweep", result="skipped").inc()
            return SweepReport(locked=False)
        after = ""
        while True:
            streams = deps.store.list_streams_with_pending_work(after=after, limit=page)
            for stream_id in streams:
                report.scanned += 1
                try:
                    recovered = recover_stuck_cycles(deps, stream_id, stuck_after)
                    if recovered:
                        report.recovered[stream_id] = recovered
                    if sweep_idle(deps, stream_id):
                        report.activated.append(stream_id)
                except (StoreUnavailableError, sa.exc.OperationalError):
                    # the database is gone for every record, not just this one: end the scan
                    raise
                except Exception:
                    # one broken record must not stop the sweep of the others
                    report.errors += 1
                    log.exception("sweep of %s failed", stream_id)
            if len(streams) < page:
                break
            after = streams[-1]
    metrics.MAINTENANCE.labels(scan="sweep", result="ok").inc()
    return report
