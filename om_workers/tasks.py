"""Celery tasks: thin wrappers around the use cases. No business logic lives here.

Each model task carries (stream id, cycle id) and calls ``run_task``, which is idempotent on that pair: a
redelivered or duplicated message finds the cycle's outcome already recorded and returns DUPLICATE, and a
result for messages observed meanwhile is recorded as stale. Transient store errors (the database dropped
the connection, a failover) are retried with exponential backoff and full jitter, a bounded number of times.

A webhook task carries one lifecycle event for one endpoint (its outbox key is the task id): a receiver
that does not answer 2xx gets it again with exponential backoff and jitter, up to
``OM_WORKER_WEBHOOK_MAX_RETRIES`` times, every time under the same delivery id.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from datetime import timedelta
from typing import Any

from celery import Celery, Task
from celery.exceptions import Reject
from celery.signals import worker_init, worker_process_init
from celery.utils.time import get_exponential_backoff_interval
from sqlalchemy.exc import OperationalError

from om_core.adapters.webhook_sender import HttpWebhookSender
from om_core.application.deps import Deps
from om_core.application.ports import StoreUnavailableError
from om_core.application.task_requests import (
    TASK_DELIVER_WEBHOOK,
    TASK_INDEX_OBSERVATIONS,
    TASK_OBSERVE_BUFFER,
    TASK_OBSERVE_SYNC,
    TASK_REFLECT,
)
from om_core.application.webhooks import Delivery, DeliveryOutcome, WebhookDeliveryError, deliver_webhook
from om_core.application.work import run_task
from om_core.domain.config import WebhookSecretError
from om_core.settings import ServerSettings
from om_workers import metrics
from om_workers.beat import LOCK_RELAY, recover_lost_work, sweep
from om_workers.bootstrap import build_worker_deps
from om_workers.names import TASK_RECOVER, TASK_RELAY_OUTBOX, TASK_SWEEP
from om_workers.relay import relay_outbox
from om_workers.settings import WorkerSettings

log = logging.getLogger(__name__)

RETRYABLE: tuple[type[BaseException], ...] = (StoreUnavailableError, OperationalError)
# a secret the worker cannot read is the operator's to fix: retried with backoff meanwhile, as when the
# receiver is down
DELIVERY_RETRYABLE: tuple[type[BaseException], ...] = (WebhookDeliveryError, WebhookSecretError, *RETRYABLE)
_RUNTIMES: list[WorkerRuntime] = []


class WorkerRuntime:
    """The Deps a worker process runs tasks with: built on first use, in the process that uses them.

    A prefork child must not inherit its parent's database connections, so ``worker_process_init`` drops
    whatever the parent may have built and the child builds its own.
    """

    def __init__(
        self, app: Celery, settings: ServerSettings, worker: WorkerSettings, deps: Deps | None = None
    ) -> None:
        self.app = app
        self.settings = settings
        self.worker = worker
        self._deps = deps
        self._owned = deps is None
        self._sender: HttpWebhookSender | None = None
        self._lock = threading.Lock()
        _RUNTIMES.append(self)

    def deps(self) -> Deps:
        if self._deps is None:
            with self._lock:
                if self._deps is None:
                    self._deps = build_worker_deps(self.app, self.settings)
        return self._deps

    def webhook_sender(self) -> HttpWebhookSender:
        if self._sender is None:
            with self._lock:
                if self._sender is None:
                    self._sender = HttpWebhookSender(timeout=self.worker.webhook_post_timeout)
        return self._sender

    def reset_after_fork(self) -> None:
        # a connection pool opened before the fork would be shared with the parent
        self._sender = None
        if self._owned:
            self._deps = None


def warm_up() -> None:
    """Pay first-use costs now, not in the first task (perhaps a synchronous one a reader waits for):
    litellm's import and first completion, and the tokenizer. In the prefork parent this happens once and
    every child inherits it."""
    from om_core.adapters.models.litellm_gateway import LiteLLMGateway, load_litellm
    from om_core.application.configuration import counter_for
    from om_core.application.ports import ModelRequest
    from om_core.domain.config import parse_memory_config

    load_litellm()
    counter_for(parse_memory_config({})).count_text("warm up")
    try:
        # the local provider: no network, no key, and it runs litellm's whole completion path once
        LiteLLMGateway().complete(
            ModelRequest(
                model="om-local/extractive",
                messages=[{"role": "user", "content": "## New message history to observe\n\nUser: hi"}],
                purpose="observer",
            )
        )
    except Exception as error:  # a warm-up failure only costs the first task some time
        log.debug("model warm-up failed: %s", error)


@worker_init.connect  # type: ignore[untyped-decorator]
def _before_fork(**_: Any) -> None:
    # in the prefork parent, so every child inherits the imported modules
    warm_up()


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _after_fork(**_: Any) -> None:
    for runtime in _RUNTIMES:
        runtime.reset_after_fork()


def register_tasks(app: Celery, runtime: WorkerRuntime) -> None:
    worker = runtime.worker
    retry_options: dict[str, Any] = {
        "bind": True,
        "max_retries": worker.max_retries,
        "acks_late": True,
        "reject_on_worker_lost": True,
    }

    def run(task: Task, task_name: str, stream_id: str, cycle_id: str, published_at: float | None) -> str:
        queue = str((task.request.delivery_info or {}).get("routing_key") or "")
        retries = int(task.request.retries or 0)
        if retries == 0:
            metrics.observe_queue_lag(queue, published_at)
        else:
            metrics.TASK_RETRIES.labels(task=task_name).inc()
        started = time.perf_counter()
        outcome = "error"
        try:
            try:
                outcome = run_task(runtime.deps(), task_name, stream_id, cycle_id).value
            except RETRYABLE as error:
                # a transient store error: again with exponential backoff and full jitter, a bounded number
                # of times (then the error is raised, and the task is found unfinished and published again)
                countdown = get_exponential_backoff_interval(1, retries, worker.retry_backoff_max, True)
                try:
                    raise task.retry(exc=error, countdown=countdown) from error
                except Reject as refused:
                    # the broker is down too: the retry cannot be handed over. The task's run did not
                    # complete, so the relay publishes it again once it is OM_WORKER_REQUEUE_AFTER overdue
                    outcome = "requeued"
                    log.warning(
                        "%s %s %s: the store failed (%s) and the broker took no retry (%s); published again "
                        "within %.0fs",
                        task_name,
                        stream_id,
                        cycle_id,
                        _first_line(error),
                        _first_line(refused.reason),
                        worker.requeue_after,
                    )
            return outcome
        finally:
            metrics.TASK_SECONDS.labels(task=task_name).observe(time.perf_counter() - started)
            metrics.TASKS.labels(task=task_name, outcome=outcome).inc()
            log.info("%s %s %s: %s", task_name, stream_id, cycle_id, outcome)

    @app.task(name=TASK_OBSERVE_BUFFER, **retry_options)  # type: ignore[untyped-decorator]
    def observe_buffer(self: Task, stream_id: str, cycle_id: str, published_at: float | None = None) -> str:
        return run(self, TASK_OBSERVE_BUFFER, stream_id, cycle_id, published_at)

    @app.task(name=TASK_OBSERVE_SYNC, **retry_options)  # type: ignore[untyped-decorator]
    def observe_sync(self: Task, stream_id: str, cycle_id: str, published_at: float | None = None) -> str:
        return run(self, TASK_OBSERVE_SYNC, stream_id, cycle_id, published_at)

    @app.task(name=TASK_REFLECT, **retry_options)  # type: ignore[untyped-decorator]
    def reflect(self: Task, stream_id: str, cycle_id: str, published_at: float | None = None) -> str:
        return run(self, TASK_REFLECT, stream_id, cycle_id, published_at)

    @app.task(name=TASK_INDEX_OBSERVATIONS, **retry_options)  # type: ignore[untyped-decorator]
    def index_observations(
        self: Task, stream_id: str, cycle_id: str, published_at: float | None = None
    ) -> str:
        return run(self, TASK_INDEX_OBSERVATIONS, stream_id, cycle_id, published_at)

    @app.task(name=TASK_DELIVER_WEBHOOK, bind=True, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def deliver(
        self: Task,
        stream_id: str,
        event_id: str,
        delivery_id: str,
        event: str,
        endpoint: str,
        body: str,
        published_at: float | None = None,
    ) -> str:
        delivery = Delivery(stream_id, event_id, delivery_id, event, endpoint, body)
        key = str(self.request.id)
        retries = int(self.request.retries or 0)
        if retries == 0:
            metrics.observe_queue_lag(
                str((self.request.delivery_info or {}).get("routing_key") or ""), published_at
            )
        started = time.perf_counter()
        try:
            outcome = deliver_webhook(runtime.deps(), runtime.webhook_sender(), delivery)
        except DELIVERY_RETRYABLE as error:
            metrics.WEBHOOK_SECONDS.observe(time.perf_counter() - started)
            if retries >= worker.webhook_max_retries:
                metrics.WEBHOOK_DELIVERIES.labels(event=event, result="failed").inc()
                log.error(
                    "webhook %s (%s) not delivered after %d attempts: %s",
                    delivery_id,
                    event,
                    retries + 1,
                    error,
                )
                runtime.deps().outbox.mark_tasks_completed([key])
                return "failed"
            metrics.WEBHOOK_DELIVERIES.labels(event=event, result="retried").inc()
            # doubling from 1 s, half of it fixed and half random: receivers coming back are not stampeded
            delay = min(worker.webhook_retry_cap, 2.0**retries)
            countdown = delay / 2 + random.uniform(0, delay / 2)
            log.warning(
                "webhook %s (%s) attempt %d failed (%s); again in %.1fs",
                delivery_id,
                event,
                retries + 1,
                error,
                countdown,
            )
            # the retry waits in this worker's memory: should the worker or the broker lose it, the
            # relay publishes the delivery again once it is overdue
            runtime.deps().outbox.postpone_task(key, countdown)
            try:
                raise self.retry(
                    exc=error, countdown=countdown, max_retries=worker.webhook_max_retries
                ) from error
            except Reject as refused:
                log.warning(
                    "webhook %s (%s): the broker took no retry (%s); published again once overdue",
                    delivery_id,
                    event,
                    _first_line(refused.reason),
                )
                return "requeued"
        runtime.deps().outbox.mark_tasks_completed([key])
        metrics.WEBHOOK_SECONDS.observe(time.perf_counter() - started)
        metrics.WEBHOOK_DELIVERIES.labels(event=event, result=outcome.value).inc()
        if outcome is not DeliveryOutcome.DELIVERED:
            log.info("webhook %s (%s) not sent: %s", delivery_id, event, outcome.value)
        return outcome.value

    # A scan that finds the database gone skips its tick: the next one comes within seconds, so a retry of
    # this one would only queue up behind it.
    @app.task(name=TASK_RELAY_OUTBOX, ignore_result=True)  # type: ignore[untyped-decorator]
    def relay() -> dict[str, int]:
        try:
            deps = runtime.deps()
            with deps.locks.try_lock(LOCK_RELAY) as locked:
                if not locked:
                    metrics.MAINTENANCE.labels(scan="relay", result="skipped").inc()
                    return {"skipped": 1}
                report = relay_outbox(app, deps.outbox, older_than_seconds=worker.republish_after)
        except RETRYABLE as error:
            return _store_unavailable("relay", error)
        metrics.MAINTENANCE.labels(scan="relay", result="ok").inc()
        return {"found": report.found, "published": report.published, "failed": report.failed}

    @app.task(name=TASK_SWEEP, ignore_result=True)  # type: ignore[untyped-decorator]
    def sweep_task() -> dict[str, int]:
        try:
            report = sweep(runtime.deps(), stuck_after=timedelta(seconds=worker.stuck_after))
        except RETRYABLE as error:
            return _store_unavailable("sweep", error)
        return {
            "scanned": report.scanned,
            "activated": len(report.activated),
            "recovered": len(report.recovered),
        }

    @app.task(name=TASK_RECOVER, ignore_result=True)  # type: ignore[untyped-decorator]
    def recover_task() -> dict[str, int]:
        try:
            report = recover_lost_work(runtime.deps(), requeue_after=worker.requeue_after)
        except RETRYABLE as error:
            return _store_unavailable("recover", error)
        return {"recovered": len(report.recovered), "requeued": report.requeued}


def _first_line(error: object) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _store_unavailable(scan: str, error: BaseException) -> dict[str, int]:
    metrics.MAINTENANCE.labels(scan=scan, result="store_unavailable").inc()
    log.warning("%s skipped this tick: the database is unavailable (%s)", scan, _first_line(error))
    return {"store_unavailable": 1}
