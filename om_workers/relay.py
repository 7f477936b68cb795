"""The outbox relay: publishes task requests that stayed unpublished after their commit.

The dispatcher publishes right after commit; whatever it could not hand over (broker down, process killed
between commit and publish) is found here, by age, and published again. Publishing twice is harmless:
tasks are idempotent on (stream, cycle).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from celery import Celery

from om_core.application.ports import Outbox
from om_workers import metrics
from om_workers.dispatcher import publish

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RelayReport:
    found: int
    published: int
    failed: int


def relay_outbox(
    app: Celery, outbox: Outbox, *, older_than_seconds: float, batch: int = 500, max_batches: int = 20
) -> RelayReport:
    """Publish outbox rows unpublished for at least ``older_than_seconds``, oldest first.

    The age bound keeps the relay from racing the dispatcher for requests committed a moment ago.
    Stops at the first broker error: the next tick tries again.
    """
    found = published = failed = 0
    for _ in range(max_batches):
        rows = outbox.fetch_unpublished_tasks(limit=batch, older_than_seconds=older_than_seconds)
        found += len(rows)
        done: list[int] = []
        for row in rows:
            try:
                publish(app, row.task_name, row.queue, row.key, row.payload)
            except Exception as error:
                failed += 1
                metrics.PUBLISH_FAILURES.labels(via="relay").inc()
                log.warning("relay: broker refused %s (%s); retrying next tick", row.key, error)
                break
            done.append(row.id)
        if done:
            outbox.mark_tasks_published(done)
            metrics.OUTBOX_PUBLISHED.labels(via="relay").inc(len(done))
            published += len(done)
        if failed or len(rows) < batch:
            break
    metrics.OUTBOX_DEPTH.set(len(outbox.fetch_unpublished_tasks(limit=10_000)))
    return RelayReport(found=found, published=published, failed=failed)
