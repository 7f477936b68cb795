"""Conversations of many styles with planted facts, for ``om bench quality``.

``generate(style, seed, messages=None)`` gives one conversation (``Conversation``: its messages, and the
facts planted in them with their category, priority, the message that says them and any superseded
values); ``facts.SearchText`` / ``fact_in`` check whether a text still holds a fact. Each conversation is
deterministic per (style, seed). Seeds below ``HELDOUT_FIRST_SEED`` are for development; seeds from it on
are held out for published figures and read differently (see ``compose``).
"""

from __future__ import annotations

from testing.styles import health, household, jobsearch, moving, oncall, project, trip, wedding
from testing.styles.compose import HELDOUT_FIRST_SEED, Conversation, StyleDef, message_text
from testing.styles.facts import CATEGORIES, Fact, SearchText, fact_in, superseded_in

# the five styles of issue 20, then others
STYLES: dict[str, StyleDef] = {
    s.name: s
    for s in (
        trip.STYLE,
        household.STYLE,
        oncall.STYLE,
        moving.STYLE,
        project.STYLE,
        health.STYLE,
        jobsearch.STYLE,
        wedding.STYLE,
    )
}


def generate(style: str, seed: int, messages: int | None = None) -> Conversation:
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; known: {', '.join(STYLES)}")
    if messages is not None and messages < 2:
        raise ValueError("a conversation needs at least 2 messages")
    return STYLES[style].generate(seed, messages)


__all__ = [
    "CATEGORIES",
    "HELDOUT_FIRST_SEED",
    "STYLES",
    "Conversation",
    "Fact",
    "SearchText",
    "fact_in",
    "generate",
    "message_text",
    "superseded_in",
]
