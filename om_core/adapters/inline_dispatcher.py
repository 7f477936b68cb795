"""The inline executor: runs requested model work in this process, for the demo and embedded tests.

Synchronous work (queue ``om.sync``) is left to the reader that requested it: it is waiting for the result
and runs the task itself. Webhook deliveries (``om.webhooks``) are left in the outbox for workers.
Background work runs right after the commit that requested it, or on one background thread when
``background`` is set, which behaves like a single worker process.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence

from om_core.application.ports import WorkDispatcher
from om_core.application.task_requests import QUEUE_SYNC, QUEUE_WEBHOOKS
from om_core.domain.envelope import TaskRequest

log = logging.getLogger(__name__)

TaskRunner = Callable[[str, str, str], object]


class InlineDispatcher(WorkDispatcher):
    def __init__(self, *, background: bool = False) -> None:
        self._runner: TaskRunner | None = None
        self._local = threading.local()
        self._background = background
        self._inbox: queue.Queue[TaskRequest | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        # om.sync work is never delivered here: the reader that asked for it runs it, without waiting
        self.runs_inline = True

    def bind(self, runner: TaskRunner) -> None:
        """Set what runs a task: ``runner(task_name, stream_id, cycle_id)``."""
        self._runner = runner
        if self._background and self._thread is None:
            self._thread = threading.Thread(target=self._work, name="om-inline-worker", daemon=True)
            self._thread.start()

    def dispatch(self, tasks: Sequence[TaskRequest]) -> None:
        # webhook deliveries are the workers' (they wait on other services, with retries): left in the
        # outbox, where a deployment with workers finds and delivers them
        background = [t for t in tasks if t.queue not in (QUEUE_SYNC, QUEUE_WEBHOOKS)]
        if self._background:
            for task in background:
                self._inbox.put(task)
            return
        # a task's own commit dispatches follow-up work: queue it and drain iteratively, never recursively
        pending: deque[TaskRequest] | None = getattr(self._local, "pending", None)
        if pending is not None:
            pending.extend(background)
            return
        self._local.pending = deque(background)
        try:
            while self._local.pending:
                self._run(self._local.pending.popleft())
        finally:
            self._local.pending = None

    def drain(self) -> None:
        """Wait until the background thread has run everything dispatched so far."""
        if self._background:
            self._inbox.join()

    def close(self) -> None:
        if self._thread is not None:
            self._inbox.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    def _work(self) -> None:
        while True:
            task = self._inbox.get()
            try:
                if task is None:
                    return
                self._run(task)
            finally:
                self._inbox.task_done()

    def _run(self, task: TaskRequest) -> None:
        if self._runner is None:
            raise RuntimeError("InlineDispatcher.bind() was not called")
        try:
            self._runner(task.task_name, str(task.payload["stream_id"]), str(task.payload["cycle_id"]))
        except Exception:
            # the outcome (or its absence) is in the stream; a crashed task is re-offered by the policy
            log.exception("task %s for %s failed", task.task_name, task.payload.get("stream_id"))
