"""The local Observer's notes are dense: every line it writes stays in the context for as long as the log
lasts, so it writes what a fact needs and nothing the log already says (issue 20). Sentences of our own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from om_core.adapters.models.om_local import count_tokens, observe_transcript
from om_core.domain.message_input import normalize_message
from om_core.domain.prompts import (
    OBSERVER_HISTORY_HEADING,
    PREVIOUS_OBSERVATIONS_HEADING,
    PRIOR_METADATA_HEADING,
    TRANSCRIPT_END_MARKER,
)
from om_core.domain.transcript import format_transcript

SYSTEM = "You are the Observer, the memory consciousness of an assistant."
# a Tuesday
START = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)


def observations(turns: list[tuple[str, str]], previous: str = "(none)", start: datetime = START) -> str:
    """The ``<observations>`` block the Observer writes for ``turns`` (role, text), a minute apart."""
    messages = [
        normalize_message(
            {
                "id": f"m{i}",
                "role": role,
                "parts": [{"type": "text", "text": text}],
                "createdAt": (start + timedelta(minutes=i)).isoformat(),
            },
            now=start,
            max_bytes=1_000_000,
        )
        for i, (role, text) in enumerate(turns)
    ]
    transcript = format_transcript(messages, gap_markers=False).text
    prompt = "\n\n".join(
        [
            PREVIOUS_OBSERVATIONS_HEADING,
            previous,
            PRIOR_METADATA_HEADING,
            "(none)",
            OBSERVER_HISTORY_HEADING,
            transcript,
            TRANSCRIPT_END_MARKER,
        ]
    )
    output = observe_transcript(prompt, SYSTEM)
    return output.split("</observations>")[0].removeprefix("<observations>").strip("\n")


def lines_of(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.startswith("* ")]


EARLIER_TODAY = "Date: Mar 10, 2026\n* 🔴 (08:10) User's cousin Idris teaches violin in Ghent"


def test_lines_of_the_day_the_log_ends_on_read_on_under_its_header() -> None:
    block = observations([("user", "The piano tuner comes on the 19th at 14:00.")], previous=EARLIER_TODAY)
    assert "Date:" not in block
    assert lines_of(block) and "14:00" in block
    # a new day opens with its header, as does a log that ended on another day
    next_day = observations(
        [("user", "The piano tuner comes on the 19th at 14:00.")], start=START + timedelta(days=1)
    )
    assert next_day.startswith("Date: Mar 11, 2026\n")
    after_yesterday = observations(
        [("user", "The piano tuner comes on the 19th at 14:00.")],
        previous=EARLIER_TODAY,
        start=START + timedelta(days=1),
    )
    assert after_yesterday.startswith("Date: Mar 11, 2026\n")


def test_a_stretch_of_small_talk_is_one_short_line() -> None:
    block = observations(
        [("user", "haha ok"), ("assistant", "Sure!"), ("user", "lol")], previous=EARLIER_TODAY
    )
    assert lines_of(block) == ["* 🟢 (09:02) Small talk"]
    assert count_tokens(block) <= 12
