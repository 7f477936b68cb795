"""The conversation generators of ``testing.styles`` and the fact checker the quality bench uses."""

from __future__ import annotations

import random
import re
from datetime import UTC, date, datetime

import pytest

from om_core.domain.message_input import normalize_message
from testing.styles import CATEGORIES, HELDOUT_FIRST_SEED, STYLES, generate, message_text
from testing.styles.compose import Builder
from testing.styles.facts import Fact, Part, SearchText, date_part, fact_in, normalise, value_part

# structural checks run on development and held-out seeds alike (nobody reads the held-out ones)
SEEDS = (3, 17, HELDOUT_FIRST_SEED + 3)


@pytest.mark.parametrize("style", STYLES)
def test_a_conversation_is_the_same_for_the_same_style_and_seed(style: str) -> None:
    first, again = generate(style, 5), generate(style, 5)
    assert first.messages == again.messages
    assert first.facts == again.facts
    assert first.messages != generate(style, 6).messages


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("seed", SEEDS)
def test_each_conversation_plants_its_declared_facts_in_messages_the_engine_accepts(
    style: str, seed: int
) -> None:
    conversation = generate(style, seed)
    messages = conversation.messages
    assert 300 <= len(messages) <= 600
    assert 18 <= len(conversation.facts) <= 24
    assert len(conversation.facts) == conversation.planned_facts
    assert len({m["id"] for m in messages}) == len(messages)
    times = [datetime.fromisoformat(m["createdAt"]) for m in messages]
    assert times == sorted(times)
    roles = [m["role"] for m in messages]
    assert roles.count("user") > len(messages) / 3 and roles.count("assistant") > len(messages) / 3
    for message in messages:
        normalize_message(message, now=datetime(2026, 1, 1, tzinfo=UTC), max_bytes=1_000_000)
    # facts sit between small talk: most messages plant nothing
    planting = {f.message_id for f in conversation.facts} | {f.confirmed_in for f in conversation.facts}
    assert len(planting) < len(messages) / 6


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("seed", SEEDS)
def test_every_value_really_occurs_where_the_fact_says(style: str, seed: int) -> None:
    conversation = generate(style, seed)
    index = {m["id"]: i for i, m in enumerate(conversation.messages)}
    for fact in conversation.facts:
        message = conversation.messages[index[fact.message_id]]
        text = message_text(message)
        if any(part.date is not None for part in fact.parts):
            # a relative date: its phrase is in the message, the date it means is not written anywhere
            assert normalise(fact.source) in normalise(text), fact
            for part in fact.parts:
                if part.date is None:
                    assert SearchText.of(text).holds((part,)), fact
        else:
            assert fact_in(fact, text), fact
        if fact.confirmed_in is not None:
            assert conversation.messages[index[fact.confirmed_in]]["role"] == "user"
            assert index[fact.confirmed_in] > index[fact.message_id]
        if fact.category == "correction":
            assert fact.superseded and fact.first_message_id is not None
            assert index[fact.first_message_id] < index[fact.message_id]
            first = conversation.messages[index[fact.first_message_id]]
            assert first["role"] == "user"
            if fact.superseded[0].date is None:
                assert SearchText.of(message_text(first)).holds(fact.superseded), fact
        for old in fact.superseded:
            assert old != fact.parts[0]


def test_every_hard_case_occurs_across_the_styles_and_facts_carry_priorities() -> None:
    facts = [f for style in STYLES for seed in (1, 2) for f in generate(style, seed).facts]
    assert {f.category for f in facts} == set(CATEGORIES)
    assert {f.priority for f in facts} == {"high", "medium", "low"}
    assert {f.language for f in facts if f.category == "relative-date"} >= {"en", "fr", "de", "ja"}
    assert any(f.superseded for f in facts if f.category == "confirmed-proposal")
    assert len(STYLES) >= 5


def test_development_seeds_never_draw_the_frames_kept_for_held_out_seeds() -> None:
    options = [f"frame {i}" for i in range(9)]
    reserved = set(options[2::3])
    dev = Builder("trip", 7, random.Random(1), datetime(2026, 1, 1, tzinfo=UTC))
    held = Builder("trip", HELDOUT_FIRST_SEED + 7, random.Random(1), datetime(2026, 1, 1, tzinfo=UTC))
    assert not {dev.choose(options) for _ in range(300)} & reserved
    assert {held.choose(options) for _ in range(300)} & reserved


def _skeletons(style: str, seeds: range) -> set[str]:
    """What a conversation's fact sentences say once names and numbers are masked."""
    out: set[str] = set()
    for seed in seeds:
        for fact in generate(style, seed).facts:
            out.add(re.sub(r"\S*[\dA-Z]\S*", "X", fact.source))
    return out


@pytest.mark.parametrize("style", STYLES)
def test_held_out_seeds_read_differently_from_development_seeds(style: str) -> None:
    development = _skeletons(style, range(1, 16))
    held_out = _skeletons(style, range(HELDOUT_FIRST_SEED, HELDOUT_FIRST_SEED + 3))
    assert held_out - development


def test_a_date_is_found_in_its_usual_renderings_and_no_other() -> None:
    fact = Fact(
        "movers", "relative-date", "high", (date_part(date(2026, 11, 18)),), "m1", "a week from today"
    )
    for rendering in (
        "- 🔴 Movers come 2026-11-18",
        "movers on 18 November 2026",
        "the movers (Nov 18, 2026)",
        "movers: November 18th",
        "Movers Wed 18 Nov",
        "Umzug am 18. November 2026",
        "déménagement le 18 novembre",
        "引っ越しは2026年11月18日",
        "movers 18/11/2026",
        "movers come on the 18th of November",
    ):
        assert fact_in(fact, rendering), rendering
    for wrong in (
        "movers on 19 November 2026",
        "movers on 18 November 2025",
        "movers 2026-11-19",
        "movers on 18 October",
        "movers in 2026",
        "Date: Nov 18, 2026",
    ):
        assert not fact_in(fact, wrong), wrong


def test_every_part_of_a_fact_must_be_on_one_line_or_under_it() -> None:
    fact = Fact("sanne", "apposition", "medium", (value_part("Sanne"), value_part("best friend")), "m1", "…")
    assert fact_in(fact, "* 🔴 Sanne, user's best friend since uni, moved to Trondheim")
    assert fact_in(fact, "* 🔴 Sanne moved to Trondheim\n  * user's best friend since uni")
    assert not fact_in(fact, "* 🔴 Sanne moved to Trondheim\n* 🔴 user has a best friend")
    assert not fact_in(fact, "* 🔴 Sannes best friend")


def test_numbers_and_units_match_however_they_are_spaced() -> None:
    p95 = Fact(
        "p95", "tool-number", "high", (value_part("p 95", "p95"), value_part("857ms")), "m1", "p(95)=857ms"
    )
    assert fact_in(p95, "http_req_duration p(95)=857ms")
    assert fact_in(p95, "- 🟡 load test p95 857 ms")
    assert not fact_in(p95, "- 🟡 load test p95 8570 ms")
    assert Part(renderings=("857ms",)) != Part(renderings=("857 ms",))


def test_unknown_styles_and_labels_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown style"):
        generate("poetry", 1)
    with pytest.raises(ValueError, match="unknown category"):
        Fact("k", "vibes", "high", (value_part("x"),), "m", "x")
