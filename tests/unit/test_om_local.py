import json
import re
from datetime import UTC, date, datetime

import pytest

from om_core.adapters.models.om_local import (
    DEGENERATE_OUTPUT,
    EMPTY_OBSERVATIONS,
    OmLocalOptions,
    OmLocalRequestError,
    OmLocalTransientError,
    count_tokens,
    essential_clause,
    extract_json,
    observe_transcript,
    reflect_observations,
    resolve_relative_dates,
    respond,
    third_person,
)
from om_core.domain.prompts import (
    EXTRACTOR_SECTIONS_LINE_PREFIX,
    OBSERVER_HISTORY_HEADING,
    PREVIOUS_OBSERVATIONS_HEADING,
    PRIOR_METADATA_HEADING,
    REFLECTOR_END_MARKER,
    REFLECTOR_OBSERVATIONS_HEADING,
    TRANSCRIPT_END_MARKER,
    build_observer_request,
    build_reflector_request,
)

SYSTEM = "You are the Observer, the memory consciousness of an assistant."


def observer_prompt(transcript: str, metadata: str = "(none)") -> str:
    return "\n\n".join(
        [
            PREVIOUS_OBSERVATIONS_HEADING,
            "(none)",
            PRIOR_METADATA_HEADING,
            metadata,
            OBSERVER_HISTORY_HEADING,
            transcript,
            TRANSCRIPT_END_MARKER + " Reply with the sections of the output format only.",
        ]
    )


def reflector_prompt(observations: str, target: int, level: int) -> str:
    return "\n\n".join(
        [
            REFLECTOR_OBSERVATIONS_HEADING,
            observations,
            f"Target size: at most {target} tokens.\nCompression level: {level}/4\nGuidance.\n"
            + REFLECTOR_END_MARKER,
        ]
    )


TRANSCRIPT = """Jan 5 2026:
User (2:30 PM): Hi there! My name is Priya Raman and I live in Lisbon.
Assistant: Nice to meet you, Priya! How can I help?
User (2:31 PM): I'm flying to Tokyo tomorrow for 12 days. Can you help me plan the trip?
  Also my budget is $3,000.
Assistant: Sure. I've booked a reminder for your flight.
Tool Call search_flights (2:32 PM): {"to": "NRT"}
Tool Result search_flights: {"flights": 3}
1 hour 30 minutes later — 01/05/2026, 4:01 PM UTC
User (4:01 PM): ok thanks lol
User: What's the weather like next Friday?
Jan 6 2026:
User (9:05 AM): sounds good
Assistant: Sure!"""


def observation_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("* ")]


def test_observer_keeps_user_facts_with_their_names_and_numbers_as_lines_about_the_user() -> None:
    output = observe_transcript(observer_prompt(TRANSCRIPT), SYSTEM)
    lines = observation_lines(output)
    assert "* 🔴 (14:30) User's name is Priya Raman and user lives in Lisbon" in lines
    # two facts of one message share a line; the relative date is resolved on the clause that has it
    assert (
        "* 🔴 (14:31) User is flying to Tokyo tomorrow for 12 days (meaning Jan 6, 2026); "
        "user's budget is $3,000" in lines
    )
    assert output.startswith("<observations>\nDate: Jan 5, 2026\n")


def test_observer_records_questions_briefly_and_resolves_relative_dates() -> None:
    lines = observation_lines(observe_transcript(observer_prompt(TRANSCRIPT), SYSTEM))
    assert "* 🟡 (14:31) User asked about plan trip" in lines
    # a question that names something (a day, a place) is kept where the agent sees it
    assert "* 🔴 (16:01) User asked: what's the weather like next Friday (meaning Jan 9, 2026)" in lines


def test_observer_records_completions_and_tool_runs_and_drops_what_the_assistant_repeats() -> None:
    output = observe_transcript(observer_prompt(TRANSCRIPT), SYSTEM)
    lines = observation_lines(output)
    assert "* ✅ (14:31) Assistant has booked a reminder for user's flight" in lines
    # the run's results name the tool: no line of its own says it ran
    assert any(line.endswith("Tool results: search_flights: flights 3") for line in lines)
    assert "Ran search_flights" not in output
    assert "Nice to meet you" not in output  # it names only what the user already said


def test_observer_drops_filler_and_small_talk() -> None:
    output = observe_transcript(observer_prompt(TRANSCRIPT), SYSTEM)
    assert "thanks" not in output
    assert "sounds good" not in output
    assert "Hi there" not in output
    assert "Date: Jan 6, 2026" not in output  # that day held only filler
    # an answer without observations would count as a failed Observer: one low-priority line says so
    only_filler = "Jan 5 2026:\nUser (9:00 AM): ok thanks lol\nAssistant: Sure!\nUser: yes"
    assert observe_transcript(observer_prompt(only_filler), SYSTEM).startswith(
        "<observations>\nDate: Jan 5, 2026\n* 🟢 Small talk\n</observations>"
    )


def test_observer_continuation_hints_and_thread_title() -> None:
    system = SYSTEM + "\n\n<thread-title>\nA 2-5 word noun phrase\n</thread-title>"
    ends_with_question = TRANSCRIPT.split("\nJan 6 2026:")[0]
    output = observe_transcript(observer_prompt(ends_with_question), system)
    assert "<current-task>\nPrimary: What's the weather like next Friday?\n</current-task>" in output
    assert "<suggested-response>\nAnswer the user's question:" in output
    answered = observe_transcript(observer_prompt(TRANSCRIPT), system)
    assert "<suggested-response>\nContinue from the assistant's last reply" in answered
    title = re.search(r"<thread-title>\n(.+)\n</thread-title>", output)
    assert title is not None and title.group(1) == "Plan Trip"
    assert "<thread-title>" not in observe_transcript(observer_prompt(TRANSCRIPT), SYSTEM)


def test_observer_answers_inline_extractors_listed_in_the_system_prompt() -> None:
    system = (
        SYSTEM
        + "\n\n# Extractors\n\n## <budget>: Trip budget\nThe user's travel budget and currency.\n\n"
        + "## <pets>: Pets\nThe user's pets.\n\n"
        + f"{EXTRACTOR_SECTIONS_LINE_PREFIX} budget, pets"
    )
    output = observe_transcript(observer_prompt(TRANSCRIPT, "- pets (Pets): a cat named Miso"), system)
    assert "<budget>\nAlso my budget is $3,000.\n</budget>" in output
    assert "<pets>\na cat named Miso\n</pets>" in output  # nothing new: the prior value is carried


def test_multi_thread_transcript_gets_one_block_per_thread() -> None:
    transcript = (
        '<thread id="t1">\nJan 5 2026:\nUser (8:00 AM): My dog is called Rex.\n</thread>\n\n'
        '<thread id="t2">\nJan 7 2026:\nUser (10:15 PM): Can you book a table for 4 at Nobu?\n</thread>'
    )
    output = observe_transcript(observer_prompt(transcript), SYSTEM)
    blocks = re.findall(r'<thread id="(t\d)">\n(.*?)</thread>', output, re.S)
    assert [thread_id for thread_id, _ in blocks] == ["t1", "t2"]
    assert "* 🔴 (08:00) User's dog is called Rex" in blocks[0][1]
    assert "Date: Jan 7, 2026\n* 🔴 (22:15) User asked: book a table for 4 at Nobu" in blocks[1][1]
    assert "<current-task>" in blocks[1][1]
    assert output.index("</thread>") < output.index("</observations>")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see you tomorrow", "(meaning Jan 6, 2026)"),
        ("I did it yesterday", "(meaning Jan 4, 2026)"),
        ("the day after tomorrow", "(meaning Jan 7, 2026)"),
        ("due in 3 days", "(meaning Jan 8, 2026)"),
        ("in two weeks", "(meaning Jan 19, 2026)"),
        ("2 weeks ago", "(meaning Dec 22, 2025)"),
        ("next Friday", "(meaning Jan 9, 2026)"),
        ("next Monday", "(meaning Jan 12, 2026)"),
        ("last Saturday", "(meaning Jan 3, 2026)"),
        ("in a month", "(meaning Feb 5, 2026)"),
        ("sometime next week", "(estimated Jan 12, 2026)"),
        ("tomorrow and then next Friday", "(meaning Jan 6, 2026) (meaning Jan 9, 2026)"),
        ("no relative date here", ""),
    ],
)
def test_relative_dates_resolve_against_the_line_date(text: str, expected: str) -> None:
    assert resolve_relative_dates(text, date(2026, 1, 5)) == expected  # a Monday


PEOPLE = ["Alice Moreau", "Bruno Costa", "Chen Wei", "Dara Okafor", "Elif Yilmaz", "Farid Haddad"]
CITIES = ["Lisbon", "Osaka", "Nairobi", "Quito", "Tallinn", "Hobart"]


def realistic_log() -> tuple[str, list[str]]:
    """About 200 observation lines over ten days, with a planted 🔴 fact per six lines."""
    lines: list[str] = []
    facts: list[str] = []
    n = 0
    for day in range(1, 11):
        lines.append(f"Date: Mar {day}, 2026")
        for hour in range(8, 28):
            if len(lines) >= 210:
                break
            n += 1
            clock = f"({hour % 24:02d}:{(n * 7) % 60:02d})"
            kind = n % 6
            if kind == 0:
                person, city = PEOPLE[n // 6 % 6], CITIES[n // 36 % 6]
                fact = f"User said: My colleague {person} moved to {city} in {1990 + n}"
                facts.append(fact)
                lines.append(f"* 🔴 {clock} {fact}, and she enjoys the quiet mornings there.")
            elif kind == 1:
                lines.append(
                    f"* 🟡 {clock} User asked: how should the quarterly report section {n} be phrased?"
                )
            elif kind == 2:
                lines.append(f"* 🟢 {clock} Assistant: Suggested rewording the introduction of draft {n}.")
            elif kind == 3:
                lines.append(f"* 🟡 {clock} Called search_docs(query) returned {n} results about budgets")
            elif kind == 4:
                lines.append(f"* ✅ {clock} Assistant: Finished formatting table {n} for the appendix.")
            else:
                lines.append(f"* 🔴 {clock} User said: I prefer concise summaries with bullet points.")
    return "\n".join(lines), facts


def test_reflector_meets_the_target_at_level_two_and_keeps_every_named_fact() -> None:
    log, facts = realistic_log()
    assert count_tokens(log) > 4_000
    target = 2_600
    output = reflect_observations(reflector_prompt(log, target, 2))
    assert count_tokens(output) < target
    for fact in facts:
        assert fact in output
    assert output.count("I prefer concise summaries with bullet points.") == 1  # deduplicated
    assert "🟢" not in output
    assert output.count("Date: ") == 10


@pytest.mark.parametrize("level", [3, 4])
def test_reflector_higher_levels_shorten_but_keep_names_and_numbers(level: int) -> None:
    log, facts = realistic_log()
    output = reflect_observations(reflector_prompt(log, 40_000, level))
    assert "🟡" not in output and "🟢" not in output
    assert "enjoys the quiet mornings" not in output
    for fact in facts:
        assert fact in output
    assert output.count("✅") == log.count("✅")


def test_reflector_under_pressure_keeps_protected_facts_and_completions() -> None:
    log, facts = realistic_log()
    output = reflect_observations(reflector_prompt(log, 500, 1))
    for fact in facts:
        assert fact in output
    assert output.count("✅") == log.count("✅")
    assert "quarterly report" not in output


def test_reflector_level_zero_keeps_questions_and_merges_split_date_groups() -> None:
    log = (
        "Date: Jan 5, 2026\n* 🔴 (09:00) User said: I live in Porto.\n"
        "* 🟡 (09:01) User asked: what time is it?\n"
        "Date: Jan 6, 2026\n* ✅ (10:00) Assistant: Fixed the login bug.\n"
        "Date: Jan 5, 2026\n* 🔴 (11:00) User said: i live in porto\n* 🟢 (11:01) Assistant: Said hello.\n"
    )
    output = reflect_observations(reflector_prompt(log, 10_000, 0))
    assert output == (
        "<observations>\nDate: Jan 5, 2026\n* 🔴 (09:00) User said: I live in Porto.\n"
        "* 🟡 (09:01) User asked: what time is it?\n\nDate: Jan 6, 2026\n"
        "* ✅ (10:00) Assistant: Fixed the login bug.\n</observations>"
    )


def test_reflector_keeps_thread_sections() -> None:
    log = '<thread id="a">\nDate: Jan 5, 2026\n* 🔴 (09:00) User said: My cat is Miso.\n</thread>'
    output = reflect_observations(reflector_prompt(log, 1_000, 2))
    assert '<thread id="a">\nDate: Jan 5, 2026\n* 🔴 (09:00) User said: My cat is Miso.\n</thread>' in output


def test_essential_clause_keeps_names_numbers_and_annotations() -> None:
    text = "User said: My sister Ana lives in Braga, she likes gardens and walks (meaning Jan 6, 2026)"
    assert essential_clause(text) == "User said: My sister Ana lives in Braga (meaning Jan 6, 2026)"


def test_outputs_are_deterministic() -> None:
    log, _ = realistic_log()
    assert reflect_observations(reflector_prompt(log, 2_000, 3)) == reflect_observations(
        reflector_prompt(log, 2_000, 3)
    )
    assert observe_transcript(observer_prompt(TRANSCRIPT), SYSTEM) == observe_transcript(
        observer_prompt(TRANSCRIPT), SYSTEM
    )


def test_extract_json_fills_the_schema_from_what_the_user_said() -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "where the user lives"},
            "budget": {"type": "integer", "description": "travel budget"},
            "pets": {"type": "array", "items": {"type": "string"}},
            "vegetarian": {"type": "boolean"},
            "tier": {"enum": ["free", "pro"]},
        },
        "required": ["city", "budget", "pets", "vegetarian", "tier"],
    }
    prompt = "## Observations\n(none)\n\n## Message history\n" + TRANSCRIPT + "\n\n--- end of input ---"
    value = json.loads(extract_json(schema, prompt))
    assert value == {
        "city": "My name is Priya Raman and I live in Lisbon.",
        "budget": 3,
        "pets": [],
        "vegetarian": False,
        "tier": "free",
    }


def test_extract_json_keeps_the_previous_value_when_nothing_new_is_said() -> None:
    schema = {"type": "object", "properties": {"employer": {"type": "string"}}}
    prompt = '## Previous value\n{"employer": "Acme"}\n\n## Observations\n(none)\n\n--- end of input ---'
    assert json.loads(extract_json(schema, prompt)) == {"employer": "Acme"}


def _observer_messages() -> list[dict[str, object]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": observer_prompt(TRANSCRIPT)}]


def test_respond_error_injection_is_reproducible_per_attempt() -> None:
    def outcomes(seed: int) -> list[int | None]:
        results: list[int | None] = []
        for attempt in range(1, 21):
            try:
                respond(_observer_messages(), OmLocalOptions(error_rate=0.5, seed=seed, attempt=attempt))
                results.append(None)
            except OmLocalTransientError as exc:
                results.append(exc.status)
        return results

    first = outcomes(7)
    assert first == outcomes(7)
    assert None in first and {429, 503} & set(first)
    assert first != outcomes(8)
    with pytest.raises(OmLocalTransientError):
        respond(_observer_messages(), OmLocalOptions(error_rate=1.0))


def test_respond_output_modes_latency_and_usage() -> None:
    slept: list[float] = []
    reply = respond(_observer_messages(), OmLocalOptions(latency_ms=250), sleep=slept.append)
    assert slept == [0.25]
    assert reply.text.startswith("<observations>") and reply.output_tokens == count_tokens(reply.text)
    assert reply.input_tokens > 100
    assert respond(_observer_messages(), OmLocalOptions(output="empty")).text == EMPTY_OBSERVATIONS
    degenerate = respond(_observer_messages(), OmLocalOptions(output="degenerate")).text
    assert degenerate == DEGENERATE_OUTPUT and len(degenerate) >= 2_000


def test_options_are_validated() -> None:
    assert OmLocalOptions.from_mapping({"latencyMs": 5, "errorRate": 0.1, "output": "empty", "seed": 3}) == (
        OmLocalOptions(latency_ms=5.0, error_rate=0.1, output="empty", seed=3)
    )
    for bad in ({"errorRate": 2}, {"output": "weird"}, {"latency": 5}, {"seed": "x"}, {"latencyMs": -1}):
        with pytest.raises(OmLocalRequestError):
            OmLocalOptions.from_mapping(bad)


def test_unrecognised_requests_are_rejected() -> None:
    with pytest.raises(OmLocalRequestError, match="answers Observer, Reflector"):
        respond([{"role": "user", "content": "hello"}], OmLocalOptions())


def test_requests_built_by_the_prompt_module_are_understood() -> None:
    observer = build_observer_request(TRANSCRIPT, thread_title_enabled=True)
    reply = respond(observer, OmLocalOptions())
    assert "User's name is Priya Raman and user lives in Lisbon" in reply.text
    assert "<thread-title>" in reply.text
    log, facts = realistic_log()
    reflector = build_reflector_request(log, level=2, target_tokens=2_600)
    reflected = respond(reflector, OmLocalOptions()).text
    assert count_tokens(reflected) < 2_600
    assert all(fact in reflected for fact in facts)


def observer_prompt_with_previous(transcript: str, previous: str) -> str:
    return observer_prompt(transcript).replace(
        f"{PREVIOUS_OBSERVATIONS_HEADING}\n\n(none)", f"{PREVIOUS_OBSERVATIONS_HEADING}\n\n{previous}"
    )


def test_observer_drops_chatter_that_names_nothing_and_keeps_lasting_personal_facts() -> None:
    transcript = (
        "Mar 3 2026:\n"
        "User (9:00 AM): Honestly, the week has been a blur and I kept putting this off until now. "
        "I'm allergic to shellfish. I prefer metric units. Let's go with httpx for the client.\n"
        "Assistant: Breaking the task into smaller steps usually makes it feel more manageable. "
        "Let me know if you want more detail."
    )
    lines = observation_lines(observe_transcript(observer_prompt(transcript), SYSTEM))
    assert lines == [
        "* 🔴 (09:00) User is allergic to shellfish; user prefers metric units; "
        "Let's go with httpx for the client"
    ]


def test_observer_does_not_repeat_what_earlier_observations_say() -> None:
    transcript = (
        "Mar 3 2026:\nUser (9:00 AM): My flight is BA2490. How early should we be at the airport? "
        "My seat is 14C."
    )
    previous = (
        "Date: Mar 2, 2026\n* 🔴 (18:00) User's flight is BA2490\n"
        "* 🟡 (18:01) User asked: how early should we be at the airport"
    )
    lines = observation_lines(observe_transcript(observer_prompt_with_previous(transcript, previous), SYSTEM))
    assert lines == ["* 🔴 (09:00) User's seat is 14C"]


def test_observer_merges_a_days_questions_and_routine_tool_runs_and_reports_failures() -> None:
    transcript = (
        "Mar 3 2026:\n"
        "User (9:00 AM): Can you run the linter again?\n"
        "Assistant: Running it.\n"
        'Tool Call run_linter: {"path": "src"}\n'
        "Tool Result run_linter: All checks passed.\n"
        "User (9:05 AM): Should this be a dataclass?\n"
        "Assistant: One moment.\n"
        'Tool Call grep: {"pattern": "total"}\n'
        "Tool Result grep: src/app.py:3: total\n"
        'Tool Call run_tests: {"path": "tests/"}\n'
        "Tool Result run_tests: FAILED tests/test_app.py::test_rounds_negative_totals - AssertionError\n"
        "  40 passed, 1 failed\n"
        "Assistant: I'll fix test_rounds_negative_totals next."
    )
    lines = observation_lines(observe_transcript(observer_prompt(transcript), SYSTEM))
    assert lines[0] == "* 🟡 (09:00) User asked about run linter again; dataclass"
    assert lines[1] == "* 🟡 (09:00) Ran run_linter"
    assert lines[2] == (
        "* 🔴 (09:05) run_tests failed: "
        "FAILED tests/test_app.py::test_rounds_negative_totals - AssertionError"
    )
    assert lines[3] == "* 🔴 (09:05) Assistant will fix test_rounds_negative_totals next"
    assert len(lines) == 4


def test_observer_keeps_what_the_assistant_commits_to() -> None:
    transcript = (
        "Mar 3 2026:\nUser (9:00 AM): Thanks!\n"
        "Assistant: Happy to help. I'll draft the email to Henrik Lund this afternoon. I hope that helps."
    )
    lines = observation_lines(observe_transcript(observer_prompt(transcript), SYSTEM))
    assert lines == [
        "* 🔴 (09:00) Assistant will draft the email to Henrik Lund this afternoon (meaning Mar 3, 2026)"
    ]


def test_observer_reduces_a_pasted_document_to_the_sentences_that_carry_details() -> None:
    filler = "The parties will review the terms and raise concerns within a reasonable period."
    body = " ".join(
        [filler] * 6
        + ["The door code for the site is 4417."]
        + [filler] * 6
        + ["Questions go to Noor Dufresne.", "Can you summarise this?"]
    )
    transcript = f"Mar 3 2026:\nUser (9:00 AM): Here's the venue proposal:\n  {body}"
    output = observe_transcript(observer_prompt(transcript), SYSTEM)
    lines = observation_lines(output)
    assert lines[0].startswith("* 🔴 (09:00) User shared a text (")
    assert lines[0].endswith(": The door code for the site is 4417.; Questions go to Noor Dufresne.")
    assert lines[1] == "* 🟡 (09:00) User asked about summarise"
    assert count_tokens("\n".join(lines)) * 3 < count_tokens(body)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I live in Porto", "User lives in Porto"),
        ("I'm allergic to sesame", "User is allergic to sesame"),
        ("I've been learning the oboe", "User has been learning the oboe"),
        ("My sister Ana really likes me", "User's sister Ana really likes user"),
        (
            "I usually watch films and I'd rather walk",
            "User usually watches films and user would rather walk",
        ),
        ("You can call me Sam", "User goes by Sam"),
        ("I was born in 1988", "User was born in 1988"),
    ],
)
def test_third_person(text: str, expected: str) -> None:
    assert third_person(text) == expected


def test_reflector_drops_values_a_later_correction_replaces() -> None:
    log = (
        "Date: Jan 5, 2026\n* 🔴 (09:00) User lives in Bruges; user's dog is called Rex\n"
        "* 🔴 (09:05) Budget: €8,100 total\n* 🔴 (09:06) User's sister is Priya\n"
        "Date: Jan 9, 2026\n* 🔴 (10:00) Correction: user lives in Matera now, not Bruges\n"
        "* 🔴 (10:02) Update: the budget is €6,050\n* 🔴 (10:03) User's brother is Luca\n"
    )
    output = reflect_observations(reflector_prompt(log, 10_000, 0))
    assert "Bruges;" not in output and "€8,100" not in output
    assert "* 🔴 (09:00) User's dog is called Rex" in output
    for kept in ("not Bruges", "€6,050", "Priya", "Luca"):
        assert kept in output


def test_observer_compresses_generated_conversations_and_keeps_their_facts() -> None:
    from om_core.domain.message_input import normalize_message
    from om_core.domain.transcript import format_transcript
    from testing.generator import STYLES, fact_found, generate

    for style in STYLES:
        conversation = generate(style, seed=7, messages=80)
        messages = [
            normalize_message(m, now=datetime(2026, 1, 1, tzinfo=UTC), max_bytes=1_000_000)[0]
            for m in conversation.messages()
        ]
        observed = ""
        message_tokens = 0
        for start in range(0, len(messages), 8):
            transcript = format_transcript(messages[start : start + 8], gap_markers=False).text
            message_tokens += count_tokens(transcript)
            prompt = observer_prompt_with_previous(transcript, observed or "(none)")
            reply = observe_transcript(prompt, SYSTEM)
            observed += "\n" + reply.split("</observations>")[0].removeprefix("<observations>")
        assert count_tokens(observed) * 3 < message_tokens, style
        latest = {f.key: f for f in conversation.facts}
        for fact in latest.values():
            assert fact_found(fact.value, observed), (style, fact)
