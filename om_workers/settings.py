"""The worker knobs, which the app and the tasks both read; importing nothing of om_workers."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class WorkerSettings(BaseSettings):
    """Worker, relay and beat knobs (``OM_WORKER_*``). Defaults suit production; tests shrink them."""

    model_config = SettingsConfigDict(env_prefix="OM_WORKER_", extra="ignore", env_ignore_empty=True)

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
    # How often lapsed leases (work whose process died) are looked for and the work taken back, and how
    # long a published task may stay unfinished, nobody holding its work, before it is published again
    # (the broker lost it). A task waiting in a queue that long is published twice: harmless, as every
    # copy after the first finds its work done.
    recover_interval: float = Field(default=5.0, gt=0)
    requeue_after: float = Field(default=30.0, gt=0)
    # A cycle in flight longer than this is recorded as failed (timeout) so the policy can ask again.
    stuck_after: float = Field(default=900.0, gt=0)
    metrics_port: int | None = Field(default=None, ge=1, le=65_535)
    # where the metrics server listens: loopback unless a scraper elsewhere must reach it (0.0.0.0 in a pod)
    metrics_address: str = "127.0.0.1"
    # where a prefork worker's processes keep their metrics (emptied at start); unset: a new directory of
    # the worker's own, removed when it stops
    metrics_dir: Path | None = None
    # Webhook deliveries: retried this many times after the first attempt, the delay doubling from 1 s up
    # to the cap (with full jitter); each POST waits this long for an answer.
    webhook_max_retries: int = Field(default=12, ge=0)
    webhook_backoff_max: float = Field(default=300.0, gt=0)
    webhook_timeout: float = Field(default=10.0, gt=0)

    @property
    def webhook_retry_cap(self) -> float:
        """The longest wait before a delivery's retry. A retry waits in the worker that took it (an ETA),
        unacknowledged: past the visibility timeout Redis would hand it to a second worker meanwhile."""
        return min(self.webhook_backoff_max, self.visibility_timeout / 2)

    @property
    def webhook_post_timeout(self) -> float:
        """How long a POST waits for an answer: within the task's soft time limit."""
        return min(self.webhook_timeout, self.soft_time_limit / 2)

    @model_validator(mode="after")
    def _consistent(self) -> WorkerSettings:
        if self.soft_time_limit >= self.time_limit:
            raise ValueError("OM_WORKER_SOFT_TIME_LIMIT must be below OM_WORKER_TIME_LIMIT")
        if self.visibility_timeout <= self.time_limit:
            raise ValueError("OM_WORKER_VISIBILITY_TIMEOUT must exceed OM_WORKER_TIME_LIMIT")
        if self.stuck_after <= self.time_limit:
            raise ValueError("OM_WORKER_STUCK_AFTER must exceed OM_WORKER_TIME_LIMIT")
        return self
