"""Prometheus metrics of the work path: appends, tasks, model calls, queue lag, outbox depth, and the usage
of every Observer and Reflector cycle.

The metrics live in prometheus_client's default registry, so a process that also serves HTTP (the API's
``/metrics``) exposes them with no extra wiring. Workers expose them with ``start_metrics_server``. A prefork
worker runs tasks in child processes: ``om worker --metrics-port`` gives them a multiprocess directory
(``PROMETHEUS_MULTIPROC_DIR``, set before this module is first imported) and the server adds up every child
(prometheus_client's multiprocess mode).

Usage is counted from the outcome events as the metered store commits them, in whichever process commits
them (a worker, or the API when a reader ran the task itself): the same figures the events and the data
parts hold, each cycle counted once, since a duplicate outcome is refused before it is counted.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

from om_core.application.ports import (
    ConcurrencyError,
    DuplicateEventError,
    EmbeddingRequest,
    EmbeddingResponse,
    EventStore,
    ModelGateway,
    ModelRequest,
    ModelResponse,
)
from om_core.application.repository import REPLAY_LISTENERS
from om_core.domain.envelope import AppendResult, NewEvent, RecordedEvent, StateSnapshot, TaskRequest
from om_core.domain.usage import cycle_usage

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)

APPENDS = Counter("om_appends_total", "Event-store appends by outcome", ["outcome"])
APPENDED_EVENTS = Counter("om_appended_events_total", "Events written by successful appends")
APPEND_SECONDS = Histogram("om_append_seconds", "Duration of an append transaction", buckets=_LATENCY_BUCKETS)
TASKS = Counter("om_tasks_total", "Tasks run by task name and outcome", ["task", "outcome"])
TASK_SECONDS = Histogram("om_task_seconds", "Task run time", ["task"], buckets=_LATENCY_BUCKETS)
TASK_RETRIES = Counter("om_task_retries_total", "Task retries after transient errors", ["task"])
MODEL_SECONDS = Histogram(
    "om_model_seconds", "Model call latency by purpose", ["purpose"], buckets=_LATENCY_BUCKETS
)
MODEL_ERRORS = Counter("om_model_errors_total", "Failed model calls by purpose", ["purpose"])
QUEUE_LAG = Histogram(
    "om_queue_lag_seconds", "From publish to task start, by queue", ["queue"], buckets=_LATENCY_BUCKETS
)
# under a prefork worker, the value the relay set last, whichever child ran it
OUTBOX_DEPTH = Gauge(
    "om_outbox_depth",
    "Outbox rows not yet published (as last seen by the relay)",
    multiprocess_mode="mostrecent",
)
OUTBOX_PUBLISHED = Counter("om_outbox_published_total", "Task requests handed to the broker", ["via"])
PUBLISH_FAILURES = Counter("om_publish_failures_total", "Publishes the broker refused", ["via"])
MAINTENANCE = Counter("om_maintenance_total", "Beat scan results", ["scan", "result"])
WORK_RECOVERED = Counter(
    "om_work_recovered_total",
    "Lost work taken back: cycles whose worker died (kind=cycle), tasks the broker lost (kind=task)",
    ["kind"],
)
STATE_REPLAYS = Counter(
    "om_state_replays_total",
    "Record reads that folded the stream from its events instead of reading its row (normally none)",
    ["reason"],
)
ERASED_WORK = Counter(
    "om_erased_work_total", "Tasks that found their record erased and did nothing", ["task"]
)
_USAGE_LABELS = ["operation", "model", "tenant"]
USAGE_CYCLES = Counter(
    "om_usage_cycles_total",
    "Observer and Reflector cycles recorded, by outcome (completed, failed)",
    [*_USAGE_LABELS, "outcome"],
)
USAGE_CALLS = Counter(
    "om_usage_calls_total",
    "Model calls of recorded cycles (retries and extractor calls included), by outcome",
    [*_USAGE_LABELS, "outcome"],
)
USAGE_TOKENS = Counter(
    "om_usage_tokens_total",
    "Tokens of recorded cycles, by direction (input, output)",
    [*_USAGE_LABELS, "direction"],
)
USAGE_COST = Counter(
    "om_usage_cost_usd_total",
    "Cost in US dollars of recorded cycles, where the provider prices it",
    _USAGE_LABELS,
)
USAGE_VERDICTS = Counter(
    "om_usage_verdicts_total",
    "What the parser made of each Observer and Reflector answer (parsed, repaired, degenerate, empty)",
    [*_USAGE_LABELS, "verdict"],
)
WEBHOOK_DELIVERIES = Counter(
    "om_webhook_deliveries_total",
    "Webhook delivery attempts by result (delivered, retried, failed, erased, unsubscribed)",
    ["event", "result"],
)
WEBHOOK_SECONDS = Histogram(
    "om_webhook_seconds", "Duration of a webhook POST, answered or not", buckets=_LATENCY_BUCKETS
)
# a cycle that failed before any call (its model could not be called) names no model
_NO_MODEL = "none"


def count_usage(events: Sequence[NewEvent]) -> None:
    """Count the usage of the outcome events among ``events``, just committed."""
    for event in events:
        found = cycle_usage(event.event_type, event.data)
        if found is None:
            continue
        usage = found.usage
        labels = {
            "operation": found.operation,
            "model": usage.model or _NO_MODEL,
            "tenant": str(event.metadata.get("tenant", "")),
        }
        USAGE_CYCLES.labels(**labels, outcome=found.outcome).inc()
        USAGE_CALLS.labels(**labels, outcome=found.outcome).inc(usage.calls)
        USAGE_TOKENS.labels(**labels, direction="input").inc(usage.input_tokens)
        USAGE_TOKENS.labels(**labels, direction="output").inc(usage.output_tokens)
        if usage.cost_usd is not None:
            USAGE_COST.labels(**labels).inc(usage.cost_usd)
        for verdict in usage.verdicts:
            USAGE_VERDICTS.labels(**labels, verdict=verdict).inc()


def _count_replay(_stream_id: str, reason: str) -> None:
    STATE_REPLAYS.labels(reason=reason).inc()


def watch_state_replays() -> None:
    """Count this process's replays on the read path (``om_state_replays_total``)."""
    if _count_replay not in REPLAY_LISTENERS:
        REPLAY_LISTENERS.append(_count_replay)


def metrics_registry() -> CollectorRegistry:
    """The registry to expose: every process's metrics under a multiprocess worker, else this process's."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return REGISTRY
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return registry


def render_latest() -> tuple[bytes, str]:
    """The exposition text and its content type, for an HTTP ``/metrics`` handler."""
    return generate_latest(metrics_registry()), CONTENT_TYPE_LATEST


def start_metrics_server(port: int, addr: str) -> None:
    """Serve ``/metrics`` on ``addr:port`` from a thread; OSError when the port cannot be bound."""
    start_http_server(port, addr=addr, registry=metrics_registry())


def forget_finished_processes() -> None:
    """Under a multiprocess directory, drop a pool process's live gauges when it exits (a worker's pool
    replaces its processes; the counters they kept stay counted)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    from celery.signals import worker_process_shutdown
    from prometheus_client import multiprocess

    @worker_process_shutdown.connect(weak=False)
    def _forget(pid: int | None = None, **_: object) -> None:
        multiprocess.mark_process_dead(pid or os.getpid())  # type: ignore[no-untyped-call]


def observe_queue_lag(queue: str, published_at: float | None) -> None:
    if published_at is not None:
        QUEUE_LAG.labels(queue=queue).observe(max(0.0, time.time() - published_at))


EMBEDDING_PURPOSE = "embedding"


class MeteredModelGateway(ModelGateway):
    """Times every model call (the latency includes the gateway's own retries: what the task waited)."""

    def __init__(self, inner: ModelGateway) -> None:
        self._inner = inner

    def complete(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        try:
            return self._inner.complete(request)
        except Exception:
            MODEL_ERRORS.labels(purpose=request.purpose).inc()
            raise
        finally:
            MODEL_SECONDS.labels(purpose=request.purpose).observe(time.perf_counter() - started)

    def embed(self, request: EmbeddingRequest) -> EmbeddingResponse:
        started = time.perf_counter()
        try:
            return self._inner.embed(request)
        except Exception:
            MODEL_ERRORS.labels(purpose=EMBEDDING_PURPOSE).inc()
            raise
        finally:
            MODEL_SECONDS.labels(purpose=EMBEDDING_PURPOSE).observe(time.perf_counter() - started)


class MeteredEventStore(EventStore):
    """Counts and times appends; every other call of the event store goes straight to the wrapped one.

    It wraps the event store role only: the record, message, outbox and index roles are not metered, and a
    runtime hands them out unwrapped (see ``Deps``).
    """

    def __init__(self, inner: EventStore) -> None:
        self._inner = inner

    def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent],
        expected_version: int,
        *,
        expected_position: int | None = None,
        snapshot: StateSnapshot | None = None,
        tasks: Sequence[TaskRequest] = (),
    ) -> AppendResult:
        started = time.perf_counter()
        try:
            result = self._inner.append(
                stream_id,
                events,
                expected_version,
                expected_position=expected_position,
                snapshot=snapshot,
                tasks=tasks,
            )
        except ConcurrencyError:
            APPENDS.labels(outcome="conflict").inc()
            raise
        except DuplicateEventError:
            APPENDS.labels(outcome="duplicate").inc()
            raise
        except Exception:
            APPENDS.labels(outcome="error").inc()
            raise
        APPEND_SECONDS.observe(time.perf_counter() - started)
        APPENDS.labels(outcome="ok").inc()
        APPENDED_EVENTS.inc(len(events))
        count_usage(events)
        return result

    def read_stream(
        self, stream_id: str, after_version: int = 0, limit: int | None = None
    ) -> list[RecordedEvent]:
        return self._inner.read_stream(stream_id, after_version, limit)

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        return self._inner.read_all(after_position, limit)

    def stream_version(self, stream_id: str) -> int:
        return self._inner.stream_version(stream_id)

    def find_event(self, event_id: uuid.UUID) -> RecordedEvent | None:
        return self._inner.find_event(event_id)

    def list_stream_ids(self, prefix: str = "", *, after: str = "", limit: int = 1000) -> list[str]:
        return self._inner.list_stream_ids(prefix, after=after, limit=limit)

    def delete_stream(self, stream_id: str) -> int:
        return self._inner.delete_stream(stream_id)
