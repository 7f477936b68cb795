"""Embedded mode: a real Celery worker inside this process, on kombu's in-memory transport.

``om serve --embedded`` (and anything else that wants no external services; its Deps are built by
``om_api.bootstrap.build_embedded``) gets the same tasks, the same dispatcher and the same code paths as a
distributed deployment; only the broker is a Python queue and the worker is a thread. The in-memory
transport polls every 5 ms instead of kombu's default second.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import Celery
from celery.beat import EmbeddedService, Scheduler
from celery.concurrency.thread import TaskPool
from celery.worker import WorkController
from celery.worker import state as worker_state

from om_workers.names import ALL_QUEUES

log = logging.getLogger(__name__)

StopFn = Callable[[], None]


class _Controller(WorkController):  # type: ignore[misc]
    """A WorkController that says when its consumer is ready to take tasks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        self.ready.set()


class _AppThreadPool(TaskPool):  # type: ignore[misc]
    """Celery's threads pool, with the worker's own app current in every pool thread.

    A pool thread finds the task a message names through Celery's *current* app, which in a server's
    process is not this one but Celery's default app, whose broker is a RabbitMQ on localhost: a task run
    there and retried (a webhook delivery) would publish its retry to that broker, where nothing consumes
    it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.executor.shutdown()
        self.executor = ThreadPoolExecutor(max_workers=self.limit, initializer=self.app.set_current)


def start_embedded_worker(app: Celery, *, concurrency: int = 2, ready_timeout: float = 30.0) -> StopFn:
    """Start a worker for ``app`` on a daemon thread, and beat's schedule beside it; returns the function
    that stops them.

    Two threads by default, so a synchronous task (om.sync) is not stuck behind a background one.
    """
    app.finalize()
    controller = _Controller(
        app=app,
        hostname=f"om-embedded@{threading.get_ident()}",
        pool_cls=_AppThreadPool,
        concurrency=concurrency,
        queues=list(ALL_QUEUES),
        loglevel="WARNING",
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        ready_callback=None,
    )
    thread = threading.Thread(target=controller.start, name="om-embedded-worker", daemon=True)
    thread.start()
    if not controller.ready.wait(ready_timeout):
        raise RuntimeError("the embedded Celery worker did not start")
    # beat's schedule too (the relay, the sweeps, taking back lost work), on Celery's own scheduler kept in
    # memory: what a deployment's `om beat` does, so that a delivery or a cycle the process lost is found
    # again after a restart in this mode as in any other
    beat = EmbeddedService(app, thread=True, scheduler_cls=Scheduler)
    beat.start()

    def stop() -> None:
        beat.stop()
        # the documented way to stop an in-thread worker (celery.contrib.testing does the same)
        worker_state.should_terminate = 0
        thread.join(30)
        worker_state.should_terminate = None
        if thread.is_alive():
            log.warning("the embedded Celery worker did not stop within 30 s")

    return stop
