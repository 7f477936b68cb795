"""The names the Celery app routes and schedules and the tasks register under, importing neither.

The model tasks' names and queues belong to the application (``om_core.application.task_requests``): the
outbox records them with each request. The maintenance scans are the workers' own.
"""

from __future__ import annotations

from om_core.application.task_requests import QUEUE_BUFFER, QUEUE_MAINTENANCE, QUEUE_SYNC, QUEUE_WEBHOOKS

TASK_RELAY_OUTBOX = "om.maintenance.relay_outbox"
TASK_SWEEP = "om.maintenance.sweep"
TASK_RECOVER = "om.maintenance.recover_lost_work"
ALL_QUEUES = (QUEUE_SYNC, QUEUE_BUFFER, QUEUE_MAINTENANCE, QUEUE_WEBHOOKS)
