"""The Celery application: broker, queues, reliability settings, routes and the beat schedule.

``celery -A om_workers.app worker`` (what ``om worker`` runs) finds ``app`` here, built from the ``OM_*``
environment (``ServerSettings``) plus the worker knobs of ``WorkerSettings`` (``OM_WORKER_*``). Outcomes are
events in Postgres, never Celery results, so there is no result backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery import Celery
from kombu import Queue  # type: ignore[attr-defined]
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from om_core.application.records import (
    QUEUE_BUFFER,
    QUEUE_MAINTENANCE,
    QUEUE_SYNC,
    TASK_INDEX_OBSERVATIONS,
    TASK_OBSERVE_BUFFER,
    TASK_OBSERVE_SYNC,
    TASK_REFLECT,
)
from om_core.settings import ServerSettings

if TYPE_CHECKING:
    from om_workers.tasks import WorkerRuntime

TASK_RELAY_OUTBOX = "om.maintenance.relay_outbox"
TASK_SWEEP = "om.maintenance.sweep"
ALL_QUEUES = (QUEUE_SYNC, QUEUE_BUFFER, QUEUE_MAINTENANCE)


class WorkerSettings(BaseSettings):
    """Worker, relay and beat knobs (``OM_WORKER_*``). Defaults suit production; tests shrink them."""

    model_config = SettingsConfigDict(env_prefix="OM_WORKER_", extra="ignore")

    # A task running longer than the soft limit gets SoftTimeLimitExceeded; the hard limit kills it.
    soft_time_limit: float = Field(default=240.0, gt=0)
    time_limit: float = Field(default=300.0, gt=0)
    # Redis redelivers an unacknowledged message after this long. It must exceed the hard time limit, or a
    # task still running would be handed to a second worker.
    visibility_timeout: float = Field(default=600.0, gt=0)
    # How often a worker looks for messages whose consumer died (kombu's restore sweep).
    restore_interval: float = Field(default=10.0, gt=0)
    max_retries: int = Field(default=8, ge=0)
    retry_backoff_max: int = Field(default=60, ge=1)
    # A publish after commit may not hold the caller up for long: the outbox keeps what failed.
    publish_timeout: float = Field(default=2.0, gt=0)
    relay_interval: float = Field(default=5.0, gt=0)
    # Outbox rows the dispatcher did not manage to publish are republished once they are this old.
    republish_after: float = Field(default=10.0, ge=0)
    sweep_interval: float = Field(default=30.0, gt=0)
    # A cycle in flight longer than this is recorded as failed (timeout) so the policy can ask again.
    stuck_after: float = Field(default=900.0, gt=0)
    metrics_port: int | None = Field(default=None, ge=1, le=65_535)

    @model_validator(mode="after")
    def _consistent(self) -> WorkerSettings:
        if self.soft_time_limit >= self.time_limit:
            raise ValueError("OM_WORKER_SOFT_TIME_LIMIT must be below OM_WORKER_TIME_LIMIT")
        if self.visibility_timeout <= self.time_limit:
            raise ValueError("OM_WORKER_VISIBILITY_TIMEOUT must exceed OM_WORKER_TIME_LIMIT")
        if self.stuck_after <= self.time_limit:
            raise ValueError("OM_WORKER_STUCK_AFTER must exceed OM_WORKER_TIME_LIMIT")
        return self


def celery_config(settings: ServerSettings, worker: WorkerSettings) -> dict[str, Any]:
    in_memory = settings.broker_url.startswith("memory://")
    if in_memory:
        # kombu's in-memory transport polls once a second by default: about two tasks a second
        transport: dict[str, Any] = {"polling_interval": 0.005}
    else:
        transport = {
            "visibility_timeout": worker.visibility_timeout,
            "unacked_restore_interval": worker.restore_interval,
            "unacked_restore_throttle": 1,
            # a broker that vanished without closing the socket must not hang a publish forever
            "socket_timeout": max(worker.publish_timeout, 5.0),
            "socket_connect_timeout": worker.publish_timeout,
        }
    return {
        "broker_url": settings.broker_url,
        "broker_transport_options": transport,
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": worker.publish_timeout,
        "task_queues": [Queue(name, routing_key=name) for name in ALL_QUEUES],  # type: ignore[no-untyped-call]
        "task_default_queue": QUEUE_BUFFER,
        "task_create_missing_queues": True,
        "task_routes": {
            TASK_OBSERVE_SYNC: {"queue": QUEUE_SYNC},
            TASK_OBSERVE_BUFFER: {"queue": QUEUE_BUFFER},
            TASK_REFLECT: {"queue": QUEUE_BUFFER},  # a sync reflection is published to om.sync explicitly
            TASK_INDEX_OBSERVATIONS: {"queue": QUEUE_MAINTENANCE},
            TASK_RELAY_OUTBOX: {"queue": QUEUE_MAINTENANCE},
            TASK_SWEEP: {"queue": QUEUE_MAINTENANCE},
        },
        # ack after the task ran: a worker that dies mid-task leaves the message to be redelivered
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_soft_time_limit": worker.soft_time_limit,
        "task_time_limit": worker.time_limit,
        # outcomes are events in the store; a result backend would be a second, unread copy
        "task_ignore_result": True,
        "result_backend": None,
        "task_serializer": "json",
        "accept_content": ["json"],
        # Flower shows tasks from these events
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "worker_hijack_root_logger": not in_memory,
        "beat_schedule": {
            "om-relay-outbox": {
                "task": TASK_RELAY_OUTBOX,
                "schedule": worker.relay_interval,
                # a tick nobody picked up is superseded by the next one
                "options": {"queue": QUEUE_MAINTENANCE, "expires": worker.relay_interval * 2},
            },
            "om-sweep": {
                "task": TASK_SWEEP,
                "schedule": worker.sweep_interval,
                "options": {"queue": QUEUE_MAINTENANCE, "expires": worker.sweep_interval * 2},
            },
        },
    }


def create_app(
    settings: ServerSettings | None = None,
    worker: WorkerSettings | None = None,
    *,
    main: str = "om",
) -> Celery:
    """A configured Celery app with the om tasks registered (their Deps are built lazily per process)."""
    return create_app_with_runtime(settings, worker, main=main)[0]


def create_app_with_runtime(
    settings: ServerSettings | None = None,
    worker: WorkerSettings | None = None,
    *,
    main: str = "om",
) -> tuple[Celery, WorkerRuntime]:
    """The app and the runtime holding the Deps its tasks use (an embedded caller shares them)."""
    from om_workers.tasks import WorkerRuntime, register_tasks

    settings = settings or ServerSettings()
    worker = worker or WorkerSettings()
    celery_app = Celery(main, set_as_current=False)
    celery_app.conf.update(celery_config(settings, worker))
    runtime = WorkerRuntime(celery_app, settings, worker)
    register_tasks(celery_app, runtime)
    return celery_app, runtime


def __getattr__(name: str) -> Any:
    # ``app`` is built on first access, so importing this module (the CLI, tests) reads no environment
    if name in ("app", "celery"):
        global app
        app = create_app()
        return app
    raise AttributeError(name)


app: Celery
