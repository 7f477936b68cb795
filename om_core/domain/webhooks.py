"""Webhooks: the lifecycle events a profile can subscribe to, the body each is POSTed with, and its
signature (docs/operations.md, Webhooks).

Pure. A lifecycle event is one ``data-om-*`` part (om_core/domain/parts.py) under a name of its own, so a
webhook receives exactly what a streamed part says, usage included. Its id is derived from the id of the
stored event it stands for and its place among that event's parts: every retry of a delivery, and every
redelivery of its task, carries the same id, and a receiver deduplicates on it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from typing import Any

from om_core.domain.parts import (
    ACTIVATION,
    BUFFERING_END,
    BUFFERING_FAILED,
    BUFFERING_START,
    OBSERVATION_END,
    OBSERVATION_FAILED,
    OBSERVATION_START,
    THREAD_UPDATE,
    Part,
)

SIGNATURE_HEADER = "OM-Webhook-Signature"
TIMESTAMP_HEADER = "OM-Webhook-Timestamp"
ID_HEADER = "OM-Webhook-Id"
EVENT_HEADER = "OM-Webhook-Event"
SIGNATURE_SCHEME = "sha256"

# a synchronous cycle's parts are named after what it did; every background run is ``buffering.*``
_PHASES = {
    OBSERVATION_START: "start",
    OBSERVATION_END: "end",
    OBSERVATION_FAILED: "failed",
    BUFFERING_START: "start",
    BUFFERING_END: "end",
    BUFFERING_FAILED: "failed",
}
_STAMPS = ("startedAt", "completedAt", "failedAt", "activatedAt", "timestamp")
_NAMESPACE = uuid.UUID("5b0c3a52-36b4-4b0e-9a4e-6f1f7a0c1e55")


def lifecycle_names(part: Part) -> list[str]:
    """The lifecycle events one part is: its own name, then ``extraction`` when a cycle's end carries
    extracted values or extraction failures (Mastra's ``onExtracted``)."""
    kind = part["type"]
    data = part["data"]
    if kind == ACTIVATION:
        return ["activation"]
    if kind == THREAD_UPDATE:
        return ["thread.update"]
    phase = _PHASES.get(kind)
    if phase is None:
        return []
    if kind in (BUFFERING_START, BUFFERING_END, BUFFERING_FAILED):
        names = [f"buffering.{phase}"]
    else:
        names = [f"{data.get('operationType', 'observation')}.{phase}"]
    if phase == "end" and (data.get("extractedValues") or data.get("extractionFailures")):
        names.append("extraction")
    return names


def delivery_id(stored_event_id: uuid.UUID, index: int, name: str) -> str:
    """The stable id of the ``index``-th lifecycle event (of name ``name``) of one stored event."""
    return str(uuid.uuid5(_NAMESPACE, f"{stored_event_id}:{index}:{name}"))


def webhook_body(*, delivery: str, name: str, part: Part, tenant: str, stored_event_id: uuid.UUID) -> str:
    """The JSON a lifecycle event is POSTed as: what and when, then the part's own data."""
    data = part["data"]
    stamp = next((data[key] for key in _STAMPS if data.get(key)), None)
    document: dict[str, Any] = {
        "id": delivery,
        "type": name,
        "createdAt": stamp,
        "tenant": tenant,
        "recordId": data.get("recordId"),
        "threadId": data.get("threadId"),
        "eventId": str(stored_event_id),
        "partType": part["type"],
        "data": data,
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value: HMAC-SHA256, keyed by the webhook's secret, of the timestamp, a dot
    and the raw body, so that neither can be replayed with the other changed."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"{SIGNATURE_SCHEME}={mac.hexdigest()}"


def verify(secret: str, timestamp: int, body: bytes, signature: str) -> bool:
    """What a receiver checks (constant time); it also refuses timestamps too far from its own clock."""
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


def endpoint_key(url: str) -> str:
    """A short fingerprint of a webhook's URL: part of its deliveries' outbox keys, and how a worker finds
    the webhook (and its secret, which never travels with a task) in the profile it runs with."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]
