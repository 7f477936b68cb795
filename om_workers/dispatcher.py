"""Hands committed task requests to Celery right after the commit that wrote them to the outbox."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from celery import Celery

from om_core.application.ports import Outbox, WorkDispatcher
from om_core.domain.envelope import JSONDict, TaskRequest
from om_workers import metrics

log = logging.getLogger(__name__)

# One quick reconnect (a pooled connection the broker dropped), then give up: the outbox has the request.
_PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.2}


def publish(app: Celery, task_name: str, queue: str, key: str, payload: JSONDict) -> None:
    """Publish one task request, its payload as the task's arguments. The outbox key is the Celery task
    id, so every copy of the same request (a republish, a redelivery) is recognisably the same task in
    Flower and in the logs."""
    kwargs: dict[str, Any] = {**payload, "published_at": time.time()}
    app.send_task(task_name, kwargs=kwargs, task_id=key, queue=queue, retry=True, retry_policy=_PUBLISH_RETRY)


class CeleryDispatcher(WorkDispatcher):
    """Publishes after commit; marks outbox rows published only once the broker accepted them.

    Never raises into the caller, and never makes it wait: the requests go to one publisher thread, so
    the broker's round trip and the outbox update are not part of the append or read that asked for the
    work (a turn's critical path). The thread publishes in order. A request the broker refused, or one
    still queued when the process stops, stays in the outbox for the relay (beat) to publish later.
    """

    runs_inline = False

    def __init__(self, app: Celery, outbox: Outbox | None = None) -> None:
        self.app = app
        self._outbox = outbox
        self._queue: queue.SimpleQueue[Sequence[TaskRequest]] = queue.SimpleQueue()
        # (pid, thread): a prefork child inherits the object but not the thread, so it starts its own
        self._publisher: tuple[int, threading.Thread] | None = None
        self._started = threading.Lock()

    def bind(self, outbox: Outbox) -> None:
        self._outbox = outbox

    def dispatch(self, tasks: Sequence[TaskRequest]) -> None:
        pid = os.getpid()
        if self._publisher is None or self._publisher[0] != pid:
            with self._started:
                if self._publisher is None or self._publisher[0] != pid:
                    self._queue = queue.SimpleQueue()
                    thread = threading.Thread(target=self._publish_forever, name="om-publish", daemon=True)
                    thread.start()
                    self._publisher = (pid, thread)
        self._queue.put(list(tasks))

    def _publish_forever(self) -> None:
        requests = self._queue
        while True:
            self._publish(requests.get())

    def _publish(self, tasks: Sequence[TaskRequest]) -> None:
        """Publish ``tasks``, then mark what the broker accepted."""
        published: list[str] = []
        for task in tasks:
            try:
                publish(self.app, task.task_name, task.queue, task.key, task.payload)
            except Exception as error:
                # the broker is unreachable: don't make the caller wait on every remaining request
                metrics.PUBLISH_FAILURES.labels(via="dispatch").inc()
                log.warning("broker refused %s (%s); the outbox relay will publish it", task.key, error)
                break
            published.append(task.key)
        if not published or self._outbox is None:
            return
        metrics.OUTBOX_PUBLISHED.labels(via="dispatch").inc(len(published))
        try:
            self._outbox.mark_keys_published(published)
        except Exception as error:
            # the relay will publish these again; a duplicate delivery is a no-op by (stream, cycle)
            log.warning("could not mark %d outbox row(s) published: %s", len(published), error)
