"""What beat's periodic tasks do: the outbox relay, the idle-TTL sweep, stuck-cycle recovery, and taking
back lost work (lapsed leases, tasks the broker lost).

Every scan runs under a scan lock (``deps.locks``; on Postgres an advisory lock every process sees): if two
beats were ever started, or a scan outlives its interval, the second scanner skips instead of doing the work
twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

import sqlalchemy as sa

from om_core.application.deps import Deps
from om_core.application.maintenance import recover_lost_cycles, recover_stuck_cycles, sweep_idle
from om_core.application.ports import StoreUnavailableError
from om_workers import metrics

log = logging.getLogger(__name__)

# Scan lock keys: arbitrary constants, unique to om ("om" in ASCII, then the scan number).
LOCK_RELAY = 0x6F6D_0001
LOCK_SWEEP = 0x6F6D_0002
LOCK_RECOVER = 0x6F6D_0003


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
    with deps.locks.try_lock(LOCK_SWEEP) as locked:
        if not locked:
            metrics.MAINTENANCE.labels(scan="sweep", result="skipped").inc()
            return SweepReport(locked=False)
        after = ""
        while True:
            streams = deps.records.list_streams_with_pending_work(after=after, limit=page)
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


@dataclass
class RecoveryReport:
    locked: bool = True
    # (stream, cycle) of the cycles taken back from holders that died
    recovered: list[tuple[str, str]] = field(default_factory=list)
    # tasks published again because the broker lost them
    requeued: int = 0


def recover_lost_work(deps: Deps, *, requeue_after: float) -> RecoveryReport:
    """Take back the cycles of holders whose leases lapsed, and mark for publishing again the tasks that
    were published ``requeue_after`` seconds ago, never finished and are held by nobody."""
    with deps.locks.try_lock(LOCK_RECOVER) as locked:
        if not locked:
            metrics.MAINTENANCE.labels(scan="recover", result="skipped").inc()
            return RecoveryReport(locked=False)
        report = RecoveryReport(recovered=recover_lost_cycles(deps))
        report.requeued = deps.outbox.requeue_lost_tasks(requeue_after)
    for stream_id, cycle_id in report.recovered:
        log.warning(
            "%s %s: its worker was lost; the cycle was taken back and its work requested again",
            stream_id,
            cycle_id,
        )
    if report.requeued:
        log.warning("%d task(s) the broker lost are published again", report.requeued)
    metrics.MAINTENANCE.labels(scan="recover", result="ok").inc()
    metrics.WORK_RECOVERED.labels(kind="cycle").inc(len(report.recovered))
    metrics.WORK_RECOVERED.labels(kind="task").inc(report.requeued)
    return report
