"""What the local Observer and Reflector keep, cause by cause (issue 20): each test is a conversation a
careful note-taker would take notes of, in sentences written for these tests only."""

from __future__ import annotations

import random
import re
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
# a Thursday
START = datetime(2026, 5, 14, 8, 0, tzinfo=UTC)


def observe(turns: list[tuple[str, str]], previous: str = "(none)", start: datetime = START) -> list[str]:
    """The observation lines the Observer writes for ``turns`` (role, text), two minutes apart."""
    messages = [
        normalize_message(
            {
                "id": f"m{i}",
                "role": role,
                "parts": [{"type": "text", "text": text}],
                "createdAt": (start + timedelta(minutes=2 * i)).isoformat(),
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
    return [line for line in output.split("</observations>")[0].splitlines() if line.startswith("* ")]


def kept(lines: list[str], *values: str) -> bool:
    text = "\n".join(lines)
    return all(value in text for value in values)


# --- 2. what the assistant proposed and the user accepted ---------------------------------------------------

FERRIES = (
    "I found three crossings for Saturday:\n"
    "1. P&O from Calais at 07:15, arriving Dover 07:45, £64\n"
    "2. DFDS from Dunkirk at 10:00, arriving Dover 12:00, £51\n"
    "3. Irish Ferries from Calais at 13:30, arriving 14:00, £70\n"
    "Let me know which suits you."
)


def test_a_pick_from_a_list_is_noted_as_the_value_it_picks() -> None:
    lines = observe(
        [("user", "Any ferries to Dover this weekend?"), ("assistant", FERRIES), ("user", "the second one")]
    )
    chose = [line for line in lines if "User chose" in line]
    assert chose and chose[0].startswith("* 🔴") and kept(chose, "DFDS from Dunkirk at 10:00", "£51")
    assert not kept(chose, "P&O") and not kept(chose, "Irish Ferries")


def test_a_comparison_and_an_ordinal_in_another_language_pick_their_option() -> None:
    cheaper = observe([("assistant", FERRIES), ("user", "hmm, the cheaper one please")])
    assert kept([line for line in cheaper if "User chose" in line], "DFDS", "£51")
    latest = observe([("assistant", FERRIES), ("user", "la troisième, merci")])
    assert kept([line for line in latest if "User chose" in line], "Irish Ferries", "13:30")


def test_a_yes_to_a_proposal_asked_as_a_question_is_noted_as_its_value() -> None:
    turns = [
        ("user", "I need to get from Lille to Brussels on Sunday evening."),
        (
            "assistant",
            "Trains are sparse then. How about the 19:42 TGV from Lille Europe, seat 61 in coach 3?",
        ),
        ("user", "yes, that"),
    ]
    lines = observe(turns)
    agreed = [line for line in lines if "User agreed to" in line]
    assert agreed and agreed[0].startswith("* 🔴") and kept(agreed, "19:42 TGV from Lille Europe", "seat 61")


def test_a_reply_in_the_next_batch_is_resolved_from_the_proposal_in_the_log() -> None:
    first = observe(
        [
            ("user", "Which plumber should I call?"),
            ("assistant", "The best fit is Hendrix Plumbing at 0161 555 0199, they do Saturdays."),
        ]
    )
    previous = "Date: May 14, 2026\n" + "\n".join(first)
    second = observe(
        [("user", "ok that one, thanks")], previous=previous, start=START + timedelta(minutes=10)
    )
    assert kept([line for line in second if "User agreed to" in line], "Hendrix Plumbing", "0161 555 0199")


def test_a_no_is_not_noted_as_a_choice() -> None:
    lines = observe([("assistant", FERRIES), ("user", "no, none of those work")])
    assert not [line for line in lines if "User chose" in line or "User agreed" in line]


# --- 3. pasted tables of any markup -------------------------------------------------------------------------


def test_a_markdown_table_is_kept_row_by_row() -> None:
    table = (
        "Here is what the movers quoted:\n"
        "| Company | Date | Price |\n|---|---|---|\n"
        "| Vangard | 3 July | 1,450 EUR |\n| PackRight | 5 July | 1,290 EUR |"
    )
    lines = observe([("user", table)])
    assert kept(lines, "Vangard", "3 July", "1,450 EUR", "PackRight", "5 July", "1,290 EUR")
    assert kept(lines, "Company, Date, Price")


def test_a_table_aligned_with_spaces_or_commas_is_kept_row_by_row() -> None:
    aligned = (
        "Plot   Crop      Sown\nA1     leeks     12 March\n"
        "B4     chard     2 April\nC2     beans     20 April"
    )
    assert kept(observe([("user", aligned)]), "A1", "leeks", "12 March", "B4", "chard", "C2", "beans")
    csv = "name,role,extension\nOrla,facilities,4412\nBenedikt,reception,4419\nYusra,security,4425"
    assert kept(observe([("user", csv)]), "Orla", "4412", "Benedikt", "4419", "Yusra", "4425")


# --- 4. relative dates in any phrasing and language ---------------------------------------------------------


def test_relative_dates_in_words_are_kept_and_resolved_against_the_message_date() -> None:
    lines = observe(
        [
            ("user", "the boiler engineer comes a week from today"),
            ("user", "and the passport renewal has to be posted in ten days"),
        ]
    )
    assert kept(lines, "a week from today (meaning May 21, 2026)", "in ten days (meaning May 24, 2026)")


def test_relative_dates_in_french_german_and_japanese_are_resolved() -> None:
    lines = observe(
        [
            ("user", "Le déménageur passe dans 4 jours."),
            ("user", "Die Schlüsselübergabe ist in drei Tagen."),
            ("user", "引っ越しは3日後です。"),
            ("user", "Et la visite de l'appartement, c'est mardi prochain."),
        ]
    )
    assert kept(lines, "dans 4 jours (meaning May 18, 2026)", "in drei Tagen (meaning May 17, 2026)")
    assert kept(lines, "3日後です (meaning May 17, 2026)", "mardi prochain (meaning May 19, 2026)")


# --- 5. the value cut out of a kept sentence ----------------------------------------------------------------


def test_a_long_sentence_keeps_its_subject_and_apposition_with_the_value() -> None:
    sentence = (
        "Ottoline, my godmother from Leeds, who I honestly haven't seen since the christening years ago, "
        "has finally decided to retire to a little cottage near Whitby with her two greyhounds and a very "
        "old piano."
    )
    lines = observe([("user", sentence)])
    assert kept(lines, "Ottoline", "godmother from Leeds", "Whitby")


def test_a_german_date_with_an_ordinal_is_one_sentence() -> None:
    lines = observe([("user", "Der Notartermin ist am 23. Juni um 10:30 Uhr, bitte nicht vergessen.")])
    assert len(lines) == 1 and kept(lines, "am 23. Juni um 10:30 Uhr")


def test_measurements_in_pasted_output_and_tool_results_are_kept() -> None:
    pasted = (
        "soak test summary\n"
        "checks.........................: 99.20% 7936 out of 8000\n"
        "iteration_duration.............: avg=1.9s min=0.8s med=1.7s max=6.2s p(95)=3.4s\n"
        "http_req_failed................: 0.80% 64 out of 8000"
    )
    assert kept(observe([("user", pasted)]), "p(95)=3.4s", "99.20%", "0.80%")
    transcript = (
        "May 14 2026:\nUser (8:00 AM): check the disk on the replica\n"
        'Tool Call disk_usage (8:01 AM): {"host": "db-replica-2"}\n'
        'Tool Result disk_usage: {"mount": "/var/lib/pg", "used_pct": "91%", "free": "38 GB"}'
    )
    prompt = "\n\n".join(
        [PREVIOUS_OBSERVATIONS_HEADING, "(none)", OBSERVER_HISTORY_HEADING, transcript, TRANSCRIPT_END_MARKER]
    )
    assert "91%" in observe_transcript(prompt, SYSTEM) and "38 GB" in observe_transcript(prompt, SYSTEM)


# --- 6. third-person facts about people and places ----------------------------------------------------------


def test_third_person_facts_opening_with_a_name_or_a_lowercase_phrase_are_kept() -> None:
    lines = observe(
        [
            ("user", "Rasmus on the billing team owns the invoice exporter."),
            ("user", "alerts for it go to #pager-payments-core"),
            ("user", "the spare bike lock key is in the kitchen drawer"),
        ]
    )
    assert kept(lines, "Rasmus on the billing team owns the invoice exporter", "#pager-payments-core")
    assert kept(lines, "spare bike lock key is in the kitchen drawer")


def test_small_talk_stays_out() -> None:
    lines = observe(
        [
            ("user", "Truth be told, I slept terribly and the coffee is not helping."),
            ("user", "We binge-watched a baking show all evening, it was hilarious."),
            ("user", "Quick question about nothing, really."),
        ]
    )
    assert lines == [] or all("🟢" in line for line in lines)


# --- 7. corrections, and a Reflector that keeps 🔴 lines while lower ones remain -------------------------


def reflect(log: str, target: int, level: int) -> str:
    prompt = "\n\n".join(
        [
            REFLECTOR_OBSERVATIONS_HEADING,
            log,
            f"Target size: at most {target} tokens.\nCompression level: {level}/4\n" + REFLECTOR_END_MARKER,
        ]
    )
    return reflect_observations(prompt)


def test_a_corrected_value_ending_in_a_question_mark_replaces_the_stale_one() -> None:
    lines = observe(
        [
            ("user", "The storage unit padlock code is 5518."),
            ("assistant", "Noted."),
            ("user", "oh wait, the storage unit padlock code is 5581 now?"),
        ]
    )
    assert kept(lines, "5581")
    reflected = reflect("Date: May 14, 2026\n" + "\n".join(lines), 2_000, 1)
    assert "5581" in reflected and "5518" not in reflected


def test_the_reflector_never_drops_a_red_line_while_a_lower_one_survives() -> None:
    rng = random.Random(20)
    words = ["kettle", "ferry", "orchard", "lantern", "quarry", "ribbon", "saddle", "tundra", "velvet"]
    for trial in range(30):
        lines = ["Date: May 14, 2026"]
        for i in range(rng.randint(20, 80)):
            marker = rng.choice(["🔴", "🔴", "🟡", "🟡", "🟢", "✅"])
            phrase = " ".join(rng.choice(words) for _ in range(rng.randint(3, 14)))
            detail = rng.choice(["", f" at {rng.randint(1, 23)}:{rng.randint(10, 59)}", " for Oskar", ""])
            lines.append(f"* {marker} ({8 + i // 10:02d}:{i % 60:02d}) User mentioned the {phrase}{detail}")
        log = "\n".join(lines)
        output = reflect(log, rng.randint(60, count_tokens(log)), rng.randint(0, 4))
        kept_lines = set(re.findall(r"\(\d\d:\d\d\) (User mentioned[^\n]*)", output))
        lower_left = any(m in output for m in ("🟡", "🟢"))
        red_lost = [line for line in lines if "🔴" in line and line.split(") ", 1)[1] not in kept_lines]
        # a shortened line is a kept line: only whole lines count as dropped
        red_lost = [line for line in red_lost if line.split(") ", 1)[1][:30] not in output]
        assert not (lower_left and red_lost), (trial, red_lost[:2])


def test_the_reflector_drops_chatter_before_a_health_fact() -> None:
    log = "Date: May 14, 2026\n* 🔴 (08:00) User is allergic to sesame\n" + "\n".join(
        f"* 🔴 (09:{i:02d}) User watched the Ferndale Bakeoff episode {i} with Marta, lol so funny"
        for i in range(40)
    )
    output = reflect(log, 300, 1)
    assert "allergic to sesame" in output


def test_a_thing_said_to_have_changed_keeps_its_new_value_whatever_it_looks_like() -> None:
    # the new values are lowercase words (a dish, a colour, a job): only the sentence's structure — a
    # definite thing, a verb of change, the value — says it is worth a note
    lines = observe(
        [
            ("user", "The starter for the dinner is pea soup and the hallway paint is chalk white."),
            ("assistant", "Lovely choices."),
            ("user", "Heads up, the starter got switched to beetroot carpaccio."),
            ("assistant", "Got it."),
            ("user", "Actually, the hallway paint changed — it's mossy green now, not chalk white."),
            ("assistant", "Noted."),
            ("user", "and Grandma's visit has been moved to the weekend after"),
            ("assistant", "Okay."),
            ("user", "lol we moved to the balcony, it's too hot inside"),
        ]
    )
    assert kept(lines, "beetroot carpaccio")
    assert kept(lines, "mossy green")
    assert kept(lines, "Grandma's visit has been moved")
    # a change of where the speaker sits names no definite thing: still small talk
    assert not kept(lines, "balcony")
    reflected = reflect("Date: May 14, 2026\n" + "\n".join(lines), 2_000, 1)
    assert "beetroot carpaccio" in reflected and "pea soup" not in reflected
