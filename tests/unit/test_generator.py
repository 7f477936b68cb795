from datetime import UTC, datetime

import pytest

from om_core.domain.message_input import normalize_message
from testing.generator import STYLES, fact_found, generate, normalise


@pytest.mark.parametrize("style", STYLES)
def test_conversations_are_reproducible_by_seed_and_differ_between_seeds(style: str) -> None:
    first = generate(style, seed=3, messages=120)
    assert first.messages() == generate(style, seed=3, messages=120).messages()
    assert first.facts == generate(style, seed=3, messages=120).facts
    assert first.messages() != generate(style, seed=4, messages=120).messages()


@pytest.mark.parametrize("style", STYLES)
def test_every_message_is_accepted_by_the_engine(style: str) -> None:
    conversation = generate(style, seed=11, messages=300)
    messages = conversation.messages()
    assert len(messages) == 300
    assert [m["role"] for m in messages] == ["user", "assistant"] * 150
    assert len({m["id"] for m in messages}) == 300
    times = [datetime.fromisoformat(m["createdAt"]) for m in messages]
    assert times == sorted(times)
    for message in messages:
        normalize_message(message, now=datetime(2026, 1, 1, tzinfo=UTC), max_bytes=1_000_000)


@pytest.mark.parametrize("style", STYLES)
def test_each_planted_value_is_in_the_message_that_states_it(style: str) -> None:
    conversation = generate(style, seed=5, messages=300)
    assert len(conversation.facts) >= 8
    by_id = {m["id"]: m for m in conversation.messages()}
    for fact in conversation.facts:
        message = by_id[fact.message_id]
        text = " ".join(str(part.get("text") or part.get("toolInvocation", {})) for part in message["parts"])
        assert fact_found(fact.value, text), fact
        assert fact.value not in fact.earlier


def test_corrections_keep_only_the_newest_value_and_remember_the_replaced_ones() -> None:
    corrected = [
        fact
        for style in STYLES
        for seed in range(6)
        for fact in generate(style, seed, 300).facts
        if fact.earlier
    ]
    assert len(corrected) >= 10
    for fact in corrected:
        assert all(old != fact.value for old in fact.earlier)


def test_the_styles_have_their_own_shapes() -> None:
    coding = generate("coding", seed=2, messages=300)
    parts = [p for m in coding.messages() for p in m["parts"]]
    assert any(p["type"] == "tool-invocation" and p["toolInvocation"]["state"] == "result" for p in parts)
    assert any(f.kind == "tool" for f in coding.facts)
    documents = generate("documents", seed=2, messages=300)
    longest = max(len(m["parts"][0]["text"].split()) for m in documents.messages() if m["role"] == "user")
    assert longest > 250
    assert any(f.kind == "document" for f in documents.facts)
    kinds = {f.kind for style in STYLES for f in generate(style, 2, 300).facts}
    assert {"statement", "correction", "commitment", "tool", "document"} <= kinds


def test_facts_are_mentioned_between_filler() -> None:
    conversation = generate("help", seed=9, messages=300)
    stating = {f.message_id for f in conversation.facts}
    assert len(stating) < len(conversation.messages()) / 8


def test_normalisation_ignores_case_and_punctuation_but_not_word_boundaries() -> None:
    assert normalise("€2,400 — Src/App.py") == "2 400 src app py"
    assert fact_found("€2,400", "the budget is now 2,400 EUR")
    assert fact_found("test_rounds_leap_day", "FAILED tests/x.py::test_rounds_leap_day")
    assert not fact_found("Ana", "Anabel lives in Porto")
    assert not fact_found("24", "flight 2400")


def test_unknown_styles_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown style"):
        generate("poetry", seed=1)
