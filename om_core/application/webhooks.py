"""Use cases of webhooks: which lifecycle events a commit owes the profile's webhooks, and delivering one.

A commit whose events stand for lifecycle events a webhook subscribes to writes one outbox row per
(lifecycle event, webhook) in its own transaction, so nothing committed is ever without its deliveries
and nothing is delivered that was not committed. The workers deliver them (the ``om.webhooks`` queue):
an append or a read never waits on a receiver. Each row carries the body as it will be POSTed; the
secret stays in the profile, where the worker looks the webhook up.
"""

from __future__ import annotations

import abc
import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from om_core.application.configuration import record_config
from om_core.application.deps import Deps
from om_core.application.profiles import ProfileNotFoundError, config_of, profile_layer, record_profile
from om_core.application.repository import load_state
from om_core.application.streams import tenant_of
from om_core.application.task_requests import webhook_request
from om_core.domain.config import MemoryConfig, Webhook, webhook_secret
from om_core.domain.envelope import NewEvent, TaskRequest
from om_core.domain.events import DomainEvent
from om_core.domain.parts import LIFECYCLE_EVENTS, parts_for_events
from om_core.domain.state import initial_state
from om_core.domain.webhooks import (
    EVENT_HEADER,
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    delivery_id,
    endpoint_key,
    lifecycle_names,
    sign,
    webhook_body,
)


def profile_webhooks(profile: Mapping[str, Any]) -> tuple[Webhook, ...]:
    """The webhooks of a server profile (a thread cannot set any: see ``configure_thread``)."""
    if not profile.get("webhooks"):
        return ()
    config: MemoryConfig = record_config(profile, initial_state(""))
    return config.webhooks


def webhook_tasks(
    deps: Deps,
    events: Sequence[DomainEvent],
    new_events: Sequence[NewEvent],
    stream_id: str,
    base_version: int,
) -> list[TaskRequest]:
    """The outbox rows a commit of ``events`` (stored as ``new_events``, onto version ``base_version``)
    owes the profile's webhooks. Without webhooks, or without a lifecycle event, it reads nothing.

    The parts of an event depend on the state just before it: the record is read as of ``base_version``
    (from this process's state cache, as a rule). When the record moved meanwhile the commit's
    compare-and-set fails anyway, and its retry asks again: nothing is planned for it.
    """
    # only the deployment's profiles can have webhooks (a tenant's cannot: check_tenant_profile)
    deployment = (deps.profile, *deps.profiles.values())
    if not any(layer.get("webhooks") for layer in deployment):
        return []
    if not any(isinstance(event, LIFECYCLE_EVENTS) for event in events):
        return []
    before = load_state(deps.records, deps.store, stream_id, deps.states)
    if before.version != base_version:
        return []
    hooks = profile_webhooks(profile_layer(deps, tenant_of(stream_id), record_profile(before)))
    if not hooks:
        return []
    config = config_of(deps, before)
    tenant = tenant_of(stream_id)
    tasks: list[TaskRequest] = []
    for index, parts in parts_for_events(before, list(events), config, status_after_each=False):
        stored = new_events[index].event_id
        named = [(name, part) for part in parts for name in lifecycle_names(part)]
        for position, (name, part) in enumerate(named):
            subscribed = [hook for hook in hooks if name in hook.events]
            if not subscribed:
                continue
            delivery = delivery_id(stored, position, name)
            body = webhook_body(
                delivery=delivery, name=name, part=part, tenant=tenant, stored_event_id=stored
            )
            for hook in subscribed:
                endpoint = endpoint_key(hook.url)
                payload = {
                    "event_id": str(stored),
                    "delivery_id": delivery,
                    "event": name,
                    "endpoint": endpoint,
                    "body": body,
                }
                tasks.append(webhook_request(stream_id, delivery, endpoint, payload))
    return tasks


# --- delivery ---------------------------------------------------------------------------------------------


class WebhookDeliveryError(Exception):
    """A delivery that did not get a 2xx answer: retried with backoff."""


class WebhookSender(abc.ABC):
    """POSTs a body to a URL (om_core/adapters/webhook_sender.py)."""

    @abc.abstractmethod
    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> int:
        """The answer's status code. Raises WebhookDeliveryError when no answer came (refused, timed out)."""


class DeliveryOutcome(enum.StrEnum):
    DELIVERED = "delivered"
    # the thread was erased since: what it said is not sent anywhere any more
    ERASED = "erased"
    # the profile no longer lists the webhook
    UNSUBSCRIBED = "unsubscribed"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One outbox row of a lifecycle event for one webhook endpoint, as the task carries it."""

    stream_id: str
    event_id: str
    delivery_id: str
    event: str
    endpoint: str
    body: str


def _record_webhooks(deps: Deps, stream_id: str) -> tuple[Webhook, ...]:
    """The webhooks of the profile the record runs under now."""
    state = load_state(deps.records, deps.store, stream_id, deps.states)
    try:
        return profile_webhooks(profile_layer(deps, tenant_of(stream_id), record_profile(state)))
    except ProfileNotFoundError:
        return ()


def deliver_webhook(deps: Deps, sender: WebhookSender, delivery: Delivery) -> DeliveryOutcome:
    """POST one lifecycle event, signed with its webhook's secret and stamped with the time of this
    attempt. Raises WebhookDeliveryError when the receiver did not answer with a 2xx, WebhookSecretError
    when the secret's variable is not set in this process."""
    hook = next(
        (h for h in _record_webhooks(deps, delivery.stream_id) if endpoint_key(h.url) == delivery.endpoint),
        None,
    )
    if hook is None or delivery.event not in hook.events:
        return DeliveryOutcome.UNSUBSCRIBED
    if deps.store.find_event(uuid.UUID(delivery.event_id)) is None:
        return DeliveryOutcome.ERASED
    body = delivery.body.encode()
    timestamp = int(deps.clock().timestamp())
    headers = {
        "Content-Type": "application/json",
        ID_HEADER: delivery.delivery_id,
        EVENT_HEADER: delivery.event,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(webhook_secret(hook, deps.environ), timestamp, body),
    }
    status = sender.post(hook.url, body, headers)
    if not 200 <= status < 300:
        raise WebhookDeliveryError(f"{hook.url} answered {status}")
    return DeliveryOutcome.DELIVERED
