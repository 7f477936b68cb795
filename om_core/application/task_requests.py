"""The work a commit asks for: task names, their queues, and the one builder of outbox task requests."""

from __future__ import annotations

from om_core.domain.envelope import JSONDict, TaskRequest

TASK_OBSERVE_BUFFER = "om.observe_buffer"
TASK_OBSERVE_SYNC = "om.observe_sync"
TASK_REFLECT = "om.reflect"
TASK_INDEX_OBSERVATIONS = "om.index_observations"
TASK_DELIVER_WEBHOOK = "om.deliver_webhook"
QUEUE_SYNC = "om.sync"
QUEUE_BUFFER = "om.buffer"
QUEUE_MAINTENANCE = "om.maintenance"
# deliveries wait on other services: a queue of their own, so a slow receiver never delays model work
QUEUE_WEBHOOKS = "om.webhooks"

# A cycle asks for its model work and, once observed, for indexing: two tasks, so two outbox keys.
_KEY_SUFFIX = {TASK_INDEX_OBSERVATIONS: ":index"}


def cycle_key(stream_id: str, cycle_id: str) -> str:
    """A cycle's lease key: the outbox key of its model task, so that a task whose cycle is leased is known
    to be running."""
    return f"{stream_id}:{cycle_id}"


def task_key(stream_id: str, cycle_id: str, task_name: str) -> str:
    """The outbox key of one task for one cycle (also the Celery task id)."""
    return cycle_key(stream_id, cycle_id) + _KEY_SUFFIX.get(task_name, "")


def task_request(stream_id: str, cycle_id: str, task_name: str, queue: str) -> TaskRequest:
    """The outbox row of one task for one cycle; its key makes a repeated request a no-op."""
    return TaskRequest(
        key=task_key(stream_id, cycle_id, task_name),
        task_name=task_name,
        queue=queue,
        payload={"stream_id": stream_id, "cycle_id": cycle_id},
    )


def webhook_request(stream_id: str, delivery_id: str, endpoint: str, payload: JSONDict) -> TaskRequest:
    """The outbox row of one lifecycle event for one webhook endpoint: one key per (event, endpoint)."""
    return TaskRequest(
        key=f"{stream_id}:webhook:{delivery_id}:{endpoint}",
        task_name=TASK_DELIVER_WEBHOOK,
        queue=QUEUE_WEBHOOKS,
        payload={"stream_id": stream_id, **payload},
    )
