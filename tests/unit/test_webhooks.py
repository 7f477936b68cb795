"""Webhooks: the ``webhooks`` option, the lifecycle events the parts stand for, their ids and signatures,
and the outbox rows a commit writes for them (docs/operations.md, Webhooks)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from om_core.adapters.webhook_sender import HttpWebhookSender
from om_core.application.append import append_messages, configure_thread
from om_core.application.erase import erase_thread
from om_core.application.manual import observe_now
from om_core.application.streams import thread_stream_id
from om_core.application.task_requests import QUEUE_WEBHOOKS, TASK_DELIVER_WEBHOOK
from om_core.application.webhooks import Delivery, DeliveryOutcome, deliver_webhook
from om_core.bootstrap import build_inline
from om_core.domain.config import ConfigError, WebhookSecretError, parse_memory_config, webhook_secret
from om_core.domain.lifecycle import LIFECYCLE_EVENTS
from om_core.domain.webhooks import delivery_id, lifecycle_names, sign, verify, webhook_body

SECRET = "0123456789abcdef-secret"
HOOK = {"url": "https://hooks.example.com/om", "secret": SECRET}


def _rule(raw: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ConfigError) as caught:
        parse_memory_config({"webhooks": [raw]})
    return caught.value.option, caught.value.rule


def test_a_webhook_subscribes_to_every_lifecycle_event_unless_it_names_some() -> None:
    (everything,) = parse_memory_config({"webhooks": [HOOK]}).webhooks
    assert everything.events == LIFECYCLE_EVENTS
    (some,) = parse_memory_config(
        {"webhooks": [{**HOOK, "events": ["observation.end", "extraction"]}]}
    ).webhooks
    assert some.events == ("observation.end", "extraction")
    # the secret is kept out of what a log would print
    assert SECRET not in repr(some)


@pytest.mark.parametrize(
    ("raw", "option", "words"),
    [
        ({**HOOK, "url": "ftp://hooks.example.com/om"}, "webhooks[0].url", "http"),
        ({**HOOK, "url": "https:///no-host"}, "webhooks[0].url", "host"),
        ({**HOOK, "secret": "short"}, "webhooks[0].secret", "16"),
        ({**HOOK, "events": ["observation.done"]}, "webhooks[0].events", "observation.end"),
        ({**HOOK, "events": []}, "webhooks[0].events", "non-empty"),
        ({**HOOK, "events": ["activation", "activation"]}, "webhooks[0].events", "twice"),
        ({"url": HOOK["url"]}, "webhooks[0]", "exactly one of secret and secretenv"),
        ({**HOOK, "secretEnv": "OM_HOOK_SECRET"}, "webhooks[0]", "exactly one"),
        ({"url": HOOK["url"], "secretEnv": "not a name"}, "webhooks[0].secretEnv", "pattern"),
    ],
)
def test_a_webhook_is_refused_with_its_rule(raw: dict[str, Any], option: str, words: str) -> None:
    found, rule = _rule(raw)
    assert found == option and words in rule.lower()


def test_a_secret_can_live_in_the_environment_of_the_process_that_signs() -> None:
    (literal,) = parse_memory_config({"webhooks": [HOOK]}).webhooks
    assert webhook_secret(literal, {}) == SECRET
    (named,) = parse_memory_config(
        {"webhooks": [{"url": HOOK["url"], "secretEnv": "OM_HOOK_SECRET"}]}
    ).webhooks
    assert webhook_secret(named, {"OM_HOOK_SECRET": SECRET}) == SECRET
    with pytest.raises(WebhookSecretError, match="OM_HOOK_SECRET is not set"):
        webhook_secret(named, {})
    with pytest.raises(WebhookSecretError, match="at least 16"):
        webhook_secret(named, {"OM_HOOK_SECRET": "short"})


def test_one_url_is_listed_once() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_memory_config({"webhooks": [HOOK, {**HOOK, "events": ["activation"]}]})
    assert caught.value.option == "webhooks" and "twice" in caught.value.rule


def test_parts_are_named_after_the_cycle_they_close() -> None:
    def part(kind: str, **data: Any) -> dict[str, Any]:
        return {"type": f"data-om-{kind}", "id": "c", "data": {"cycleId": "c", **data}}

    assert lifecycle_names(part("observation-start", operationType="observation")) == ["observation.start"]
    assert lifecycle_names(part("observation-end", operationType="reflection")) == ["reflection.end"]
    assert lifecycle_names(part("observation-failed", operationType="reflection")) == ["reflection.failed"]
    assert lifecycle_names(part("buffering-start", operationType="reflection")) == ["buffering.start"]
    assert lifecycle_names(part("buffering-end", operationType="observation", extractedValues={"a": 1})) == [
        "buffering.end",
        "extraction",
    ]
    assert lifecycle_names(part("activation")) == ["activation"]
    assert lifecycle_names(part("thread-update")) == ["thread.update"]
    assert lifecycle_names(part("status")) == []


def test_ids_are_derived_from_the_stored_event_and_signatures_bind_the_timestamp() -> None:
    stored = uuid.uuid4()
    assert delivery_id(stored, 0, "activation") == delivery_id(stored, 0, "activation")
    assert len({delivery_id(stored, i, "activation") for i in range(3)}) == 3
    assert delivery_id(stored, 0, "activation") != delivery_id(uuid.uuid4(), 0, "activation")
    body = webhook_body(
        delivery="d",
        name="activation",
        part={"type": "data-om-activation", "id": "c", "data": {"activatedAt": "2026-01-01T00:00:00Z"}},
        tenant="acme",
        stored_event_id=stored,
    ).encode()
    assert json.loads(body)["createdAt"] == "2026-01-01T00:00:00Z"
    signature = sign(SECRET, 1_700_000_000, body)
    assert signature.startswith("sha256=") and verify(SECRET, 1_700_000_000, body, signature)
    # a replay with a fresh timestamp, another body or another secret does not verify
    assert not verify(SECRET, 1_700_000_001, body, signature)
    assert not verify(SECRET, 1_700_000_000, body + b" ", signature)
    assert not verify("another-secret-0123456", 1_700_000_000, body, signature)


def test_a_commit_writes_one_outbox_row_per_subscribed_event_and_a_thread_cannot_add_webhooks(
    tmp_path: Path,
) -> None:
    profile = {
        "model": "om-local/extractive",
        "observation": {"messageTokens": 30_000, "bufferTokens": False},
        "webhooks": [{**HOOK, "events": ["observation.start", "observation.end"]}],
    }
    deps, dispatcher = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=profile)
    try:
        with pytest.raises(ConfigError) as caught:
            configure_thread(deps, tenant="a", thread_id="t", config={"webhooks": [HOOK]})
        assert caught.value.option == "webhooks"
        messages = [
            {"id": f"m{i}", "role": "user", "content": f"I moved to Lisbon in {2000 + i}."} for i in range(4)
        ]
        append_messages(deps, tenant="a", thread_id="t", messages=messages)

        def deliveries() -> list[Any]:
            return [r for r in deps.outbox.fetch_unpublished_tasks() if r.task_name == TASK_DELIVER_WEBHOOK]

        # an append with no lifecycle event owes the webhook nothing
        assert deliveries() == []
        assert observe_now(deps, tenant="a", thread_id="t").outcome == "completed"
        rows = deliveries()
        # the inline executor leaves deliveries to workers: start and end wait in the outbox
        assert [row.payload["event"] for row in rows] == ["observation.start", "observation.end"]
        assert {row.queue for row in rows} == {QUEUE_WEBHOOKS}
        stored = {str(r.event_id) for r in deps.store.read_stream(thread_stream_id("a", "t"))}
        for row in rows:
            body = json.loads(row.payload["body"])
            assert row.payload["event_id"] in stored and body["eventId"] == row.payload["event_id"]
            assert body["id"] == row.payload["delivery_id"] and body["tenant"] == "a"
            assert SECRET not in row.payload["body"] and SECRET not in json.dumps(row.payload)
        end = json.loads(rows[1].payload["body"])
        assert end["data"]["usage"]["model"] == "om-local/extractive"

        # what a worker finds when it takes such a row later: no POST to a webhook the profile dropped,
        # nor for a thread erased meanwhile
        delivery = Delivery(**rows[1].payload)
        sender = HttpWebhookSender(timeout=1)
        unlisted = replace(deps, profile={k: v for k, v in profile.items() if k != "webhooks"})
        assert deliver_webhook(unlisted, sender, delivery) is DeliveryOutcome.UNSUBSCRIBED
        erase_thread(deps, tenant="a", thread_id="t")
        assert deliver_webhook(deps, sender, delivery) is DeliveryOutcome.ERASED
    finally:
        dispatcher.close()
        deps.close()
