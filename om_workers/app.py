"""The Celery application: broker, queues, reliability settings, routes and the beat schedule.

``celery -A om_workers.app worker`` (what ``om worker`` runs) finds ``app`` here, built from the ``OM_*``
environment (``ServerSettings``) plus the worker knobs of ``WorkerSettings`` (``OM_WORKER_*``). Outcomes are
events in Postgres, never Celery results, so there is no result backend.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu import Queue  # type: ignore[attr-defined]

from om_core.application.task_requests import (
    QUEUE_BUFFER,
    QUEUE_MAINTENANCE,
    QUEUE_SYNC,
    QUEUE_WEBHOOKS,
    TASK_DELIVER_WEBHOOK,
    TASK_INDEX_OBSERVATIONS,
    TASK_OBSERVE_BUFFER,
    TASK_OBSERVE_SYNC,
    TASK_REFLECT,
)
from om_core.settings import ServerSettings
from om_workers.names import ALL_QUEUES, TASK_RECOVER, TASK_RELAY_OUTBOX, TASK_SWEEP
from om_workers.settings import WorkerSettings
from om_workers.tasks import WorkerRuntime, register_tasks


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
            TASK_DELIVER_WEBHOOK: {"queue": QUEUE_WEBHOOKS},
            TASK_RELAY_OUTBOX: {"queue": QUEUE_MAINTENANCE},
            TASK_SWEEP: {"queue": QUEUE_MAINTENANCE},
            TASK_RECOVER: {"queue": QUEUE_MAINTENANCE},
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
            "om-recover-lost-work": {
                "task": TASK_RECOVER,
                "schedule": worker.recover_interval,
                "options": {"queue": QUEUE_MAINTENANCE, "expires": worker.recover_interval * 2},
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
