"""The local Observer's notes are dense: every line it writes stays in the context for as long as the log
lasts, so it writes what a fact needs and nothing the log already says (issue 20). Sentences of our own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from om_core.adapters.models.om_local import count_tokens, observe_transcript, reflect_observations
from om_core.domain.message_input import normalize_message
from om_core.domain.prompts import (
    OBSERVER_HISTORY_HEADING,
    PREVIOUS_OBSERVATIONS_HEADING,
    PRIOR_METADATA_HEADING,
    REFLECTOR_END_MARKER,
    REFLECTOR_OBSERVATIONS_HEADING,
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
        )[0]
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
    assert lines_of(block) == ["* 🟢 Small talk"]
    assert count_tokens(block) <= 6


def test_a_topic_asked_again_in_other_words_is_noted_once() -> None:
    first = observations([("user", "What should I pack for the glacier hike?")])
    assert "glacier hike" in first
    again = [
        "Quick sanity check on packing for the glacier hike?",
        "Back to this: what am I forgetting for the glacier hike?",
        "Can you explain the glacier hike packing like I'm ten?",
    ]
    for question in again:
        block = observations([("user", question)], previous=first)
        assert "asked" not in block, question
    # a question that names something new is noted, even about a topic asked before
    named = observations([("user", "Is the glacier hike on Saturday still at 07:30?")], previous=first)
    assert "07:30" in named


def test_a_question_about_what_was_just_said_adds_no_topic() -> None:
    for question in ("Any thoughts?", "Does this look right?", "Can you double-check it?"):
        assert "asked" not in observations([("user", question)]), question
    # a question in a word of its own names its topic
    assert "dataclass" in observations([("user", "Should this be a dataclass?")])


def test_the_sentence_introducing_a_pasted_table_is_no_note_of_its_own() -> None:
    pasted = (
        "Pasting the swim lessons below\n\n"
        "| pool | day | coach |\n|---|---|---|\n"
        "| Zuiderbad | Wednesday | Maren |\n| Sloterparkbad | Sunday | Joost |"
    )
    block = observations([("user", pasted)])
    assert "Pasting" not in block
    (line,) = lines_of(block)
    # the columns are named once; a row's weekday is the schedule's, not a coming day
    assert line.endswith(
        "User shared a table (pool, day, coach): Zuiderbad: Wednesday, Maren; Sloterparkbad: Sunday, Joost"
    )


def test_a_tool_run_with_findings_is_one_line_naming_the_tool_once() -> None:
    transcript_run = (
        "Mar 10 2026:\n"
        "User (9:00 AM): How much did the heat pump use?\n"
        'Tool Call heat_meter: {"period": "week"}\n'
        'Tool Result heat_meter: {"heating": "61 kWh", "hot_water": "18 kWh"}'
    )
    prompt = "\n\n".join(
        [
            PREVIOUS_OBSERVATIONS_HEADING,
            "(none)",
            PRIOR_METADATA_HEADING,
            "(none)",
            OBSERVER_HISTORY_HEADING,
            transcript_run,
            TRANSCRIPT_END_MARKER,
        ]
    )
    output = observe_transcript(prompt, SYSTEM)
    assert "Ran heat_meter" not in output
    assert "Tool results: heat_meter: heating 61 kWh; hot_water 18 kWh" in output


def test_how_the_day_went_is_small_talk_while_a_day_to_come_dates_a_fact() -> None:
    for chatter in (
        "My printer has been weirdly good today.",
        "The tram was driving me up the wall yesterday.",
        "My inbox is driving me a bit mad today.",
    ):
        assert "🔴" not in observations([("user", chatter)]), chatter
    assert "🔴" in observations([("user", "My brother lands tomorrow.")])


def test_a_question_brought_back_with_a_lead_is_the_same_question() -> None:
    first = observations([("user", "Should we buy the Interrail pass?")])
    assert "Interrail" in first
    again = observations([("user", "Back to this: should we buy the Interrail pass?")], previous=first)
    assert "asked" not in again


def test_the_assistant_saying_its_proposal_again_or_giving_advice_adds_no_line() -> None:
    block = observations(
        [
            ("user", "Which ferry should we take to Texel?"),
            (
                "assistant",
                "I found three that fit:\n1. TESO at 09:30\n2. TESO at 11:30\n3. TESO at 13:30\n"
                "If I had to choose, 11:30. Book early on Saturdays, they fill up.",
            ),
        ]
    )
    assert "found three" not in block
    assert "Book early" not in block
    assert sum("11:30" in line for line in lines_of(block)) == 1


def test_dot_leaders_in_tool_output_shrink_to_a_colon() -> None:
    transcript = (
        "Mar 10 2026:\n"
        'Tool Call load_test: {"vus": 40}\n'
        "Tool Result load_test: latency_p95...............: 612ms\n  errors....................: 0.4%"
    )
    prompt = "\n\n".join(
        [
            PREVIOUS_OBSERVATIONS_HEADING,
            "(none)",
            PRIOR_METADATA_HEADING,
            "(none)",
            OBSERVER_HISTORY_HEADING,
            transcript,
            TRANSCRIPT_END_MARKER,
        ]
    )
    output = observe_transcript(prompt, SYSTEM)
    assert "load_test: latency_p95: 612ms; errors: 0.4%" in output


def test_a_sentence_opening_with_a_word_that_opens_code_is_prose() -> None:
    block = observations([("user", "from the landlord's note, verbatim: la chaudière est révisée à 08:40")])
    assert "08:40" in block
    pasted = observations([("user", "It fails here:\nfrom billing import invoice\nif invoice.total():")])
    assert "import" not in pasted


def test_taking_back_what_was_said_is_a_correction_kept_with_its_new_value() -> None:
    for correction, value in (
        ("Scratch what I said about the venue: Lindenhof.", "Lindenhof"),
        ("Ignore what we wrote about the caterer: Mezze Brothers.", "Mezze Brothers"),
    ):
        block = observations([("user", correction)])
        assert "🔴" in block and value in block, correction


def test_a_short_amount_of_money_is_a_detail() -> None:
    assert "£85" in observations([("user", "Also, we pay £85 a month for the allotment.")])


def test_the_reflector_reads_a_log_of_dense_notes_and_drops_small_talk_before_facts() -> None:
    first = observations([("user", "My cousin Idris teaches violin in Ghent.")])
    chunks = [first]
    for minute in range(1, 40):
        turns = [("user", "haha ok"), ("assistant", "Sure!")]
        if minute % 4 == 0:
            turns = [("user", f"The piano tuner's invoice number is PT-{4400 + minute}.")]
        chunks.append(
            observations(turns, previous="\n\n".join(chunks), start=START + timedelta(minutes=minute))
        )
    # later chunks of the same day carry no header of their own
    assert sum(chunk.count("Date:") for chunk in chunks) == 1
    log = "\n\n".join(chunks)
    prompt = "\n\n".join(
        [
            REFLECTOR_OBSERVATIONS_HEADING,
            log,
            f"Target size: at most {count_tokens(log) // 2} tokens.\nCompression level: 1/4\n"
            + REFLECTOR_END_MARKER,
        ]
    )
    reflected = reflect_observations(prompt)
    assert reflected.count("Date: Mar 10, 2026") == 1
    assert "Idris" in reflected and all(f"PT-{4400 + m}" in reflected for m in range(4, 40, 4))
    assert "Small talk" not in reflected
