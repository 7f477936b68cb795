"""Bounded model spend: a Reflector whose output stays over the threshold never sets off a cascade.

The Reflector here hands back its input less one line, so every reflection is still over
``observationTokens`` and every one runs the whole compression ladder. Below reflection.blockAfter an
operation (an append with the background work it runs inline, or a read) starts at most one reflection;
at blockAfter a read costs at most the ladder's four attempts.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from om_core.application.append import append_messages, configure_thread
from om_core.application.context import read_context
from om_core.application.ports import ModelRequest, ModelResponse, ModelUsage
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline
from om_core.domain.thresholds import MAX_COMPRESSION_ATTEMPTS
from testing.parity import ParityModels, scratch_database

TENANT, THREAD = "spend", "t"
WORDS = [
    "harbour",
    "lantern",
    "copper",
    "orchard",
    "violet",
    "meadow",
    "granite",
    "falcon",
    "juniper",
    "saffron",
    "ember",
    "willow",
]


class KeepingReflector(ParityModels):
    """Observes like Mastra's mock; reflects by dropping only the first bullet (never under target)."""

    def __init__(self) -> None:
        super().__init__()
        self.reflector_calls = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose != "reflector":
            return super().complete(request)
        self.reflector_calls += 1
        user = "\n".join(str(m["content"]) for m in request.messages if m["role"] == "user")
        bullets = [line.strip() for line in user.splitlines() if line.strip().startswith("* ")]
        text = "<observations>\n" + "\n".join(bullets[1:]) + "\n</observations>"
        usage = ModelUsage(input_tokens=len(user) // 4, output_tokens=len(text) // 4)
        return ModelResponse(text=text, model=request.model, usage=usage, latency_ms=0.0, attempts=1)


def _profile(reflection_block_after: float | int) -> dict[str, Any]:
    return {
        "model": "om-local/extractive",
        "tokenizer": "tokenx",
        "observation": {
            "messageTokens": 400,
            "bufferTokens": 0.25,
            "bufferActivation": 0.8,
            "blockAfter": 1.5,
        },
        "reflection": {
            "observationTokens": 300,
            "bufferActivation": 0.5,
            "blockAfter": reflection_block_after,
        },
    }


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 18))).capitalize() + "."


def _turns(block_after: float | int, turns: int) -> Iterator[tuple[dict[str, Any], KeepingReflector, int]]:
    """After each operation: the read's status (empty after an append), the model double, and how many
    reflections the operation started."""
    models = KeepingReflector()
    rng = random.Random(7)
    now = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    with scratch_database() as url:
        deps, dispatcher = build_inline(database_url=url, profile=_profile(block_after), models=models)
        deps.clock = lambda: now
        stream = thread_stream_id(TENANT, THREAD)

        def reflections() -> int:
            return sum(r.event_type == "ReflectionRequested" for r in deps.store.read_stream(stream))

        try:
            configure_thread(deps, tenant=TENANT, thread_id=THREAD)
            for turn in range(turns):
                now += timedelta(minutes=2)
                for role in ("user", "assistant"):
                    text = " ".join(_sentence(rng) for _ in range(rng.randint(1, 3)))
                    message = {
                        "id": f"{role}-{turn}",
                        "role": role,
                        "parts": [{"type": "text", "text": text}],
                    }
                    before = reflections()
                    append_messages(deps, tenant=TENANT, thread_id=THREAD, messages=[message])
                    yield {}, models, reflections() - before
                    if role == "user":
                        before = reflections()
                        status = read_context(deps, tenant=TENANT, thread_id=THREAD).window.status
                        yield status, models, reflections() - before
        finally:
            dispatcher.close()
            deps.close()


def test_below_reflection_block_after_an_operation_starts_at_most_one_reflection() -> None:
    steps = list(_turns(100_000, 60))
    reads = [status for status, _, _ in steps if status]
    per_read = [status["thisRead"]["reflectorCalls"] for status in reads]
    per_step = [calls for _, _, calls in steps]
    generations = reads[-1]["generationCount"]
    models = steps[-1][1]
    assert models.reflector_calls > 0 and generations > 0, "the conversation never reflected"
    assert max(per_step) <= 1, per_step
    # one reflection is at most the ladder's attempts
    assert max(per_read) <= MAX_COMPRESSION_ATTEMPTS, per_read
    # each reflection waits for new observations: never more generations than observation batches
    assert generations <= models.calls["observer"]


@pytest.mark.parametrize("block_after", [1.3])
def test_at_reflection_block_after_a_read_costs_at_most_the_ladder(block_after: float) -> None:
    per_read = [status["thisRead"]["reflectorCalls"] for status, _, _ in _turns(block_after, 60) if status]
    assert max(per_read) > 1, "no read reached reflection.blockAfter"
    assert max(per_read) <= MAX_COMPRESSION_ATTEMPTS, per_read
