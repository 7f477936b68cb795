import re
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from om_core.domain.observation_log import (
    TruncationResult,
    is_truncation_marker,
    observation_group_id,
    optimize_observations_for_context,
    render_groups_for_context,
    strip_group_tags,
    truncate_previous_observations,
    truncation_marker,
    wrap_observation_group,
)


def words(text: str) -> int:
    return len(text.split())


def prior_log(lines: int = 400) -> str:
    out = []
    for i in range(lines):
        if i % 40 == 0:
            out.append(f"Date: May {1 + i // 40}, 2023")
        marker = "🔴" if i % 10 == 0 else "🟡"
        out.append(f"* {marker} (10:{i % 60:02d}) observation number {i}")
    return "\n".join(out)


# Scenario 32


def test_scenario_32_budget_keeps_newest_and_marks_hidden_runs() -> None:
    text = prior_log()
    result = truncate_previous_observations(text, 200, words)
    assert result.was_truncated
    assert words(result.text) <= 200
    assert "observation number 399" in result.text
    assert "observation number 0\n" not in result.text + "\n"
    assert re.search(r"\[\d+ observations truncated here\]", result.text)
    assert text.count("\n") == 409  # the stored text is untouched


def test_false_and_none_budgets_return_full_text() -> None:
    text = prior_log()
    assert truncate_previous_observations(text, False, words) == TruncationResult(text, False)
    assert truncate_previous_observations(text, None, words).text == text


def test_zero_budget_shows_nothing() -> None:
    assert truncate_previous_observations(prior_log(), 0, words) == TruncationResult("", True)
    assert truncate_previous_observations("", 0, words) == TruncationResult("", False)


def test_within_budget_untouched() -> None:
    text = "Date: May 1, 2023\n* 🔴 (10:00) a"
    assert truncate_previous_observations(text, 100, words) == TruncationResult(text, False)


def test_important_lines_kept_with_their_date_headers_and_bounded_by_tail() -> None:
    lines = ["Date: May 1, 2023", "* 🔴 (09:00) User is allergic to peanuts"]
    lines += [f"* 🟡 (10:{i:02d}) filler {i}" for i in range(50)]
    lines += ["Date: May 2, 2023"] + [f"* 🟡 (11:{i:02d}) recent {i}" for i in range(5)]
    result = truncate_previous_observations("\n".join(lines), 40, words)
    assert result.was_truncated
    out = result.text.split("\n")
    assert out[:3] == [
        "Date: May 1, 2023",
        "* 🔴 (09:00) User is allergic to peanuts",
        "[50 observations truncated here]",
    ]
    assert out[-1] == "* 🟡 (11:04) recent 4"
    assert words(result.text) <= 40


def test_single_hidden_line_is_kept_instead_of_a_marker() -> None:
    lines = ["* 🔴 a", "* 🟡 x", "* 🔴 b", "* 🟡 y1", "* 🟡 y2", "* 🟡 y3", "* 🟡 t1", "* 🟡 t2"]
    result = truncate_previous_observations("\n".join(lines), 20, words)
    assert result == TruncationResult(
        "* 🔴 a\n* 🟡 x\n* 🔴 b\n[3 observations truncated here]\n* 🟡 t1\n* 🟡 t2", True
    )


def test_nothing_fits_returns_only_marker() -> None:
    text = "\n".join(f"* 🔴 a very long observation line number {i} with many words" for i in range(10))
    assert truncate_previous_observations(text, 6, words) == TruncationResult(
        "[10 observations truncated here]", True
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(["* 🔴 a b c", "* 🟡 d e", "* ✅ done it", "Date: May 1, 2023", "", "* 🟢 x"]),
        max_size=80,
    ),
    st.integers(min_value=1, max_value=60),
)
def test_truncation_respects_budget_or_returns_only_marker(lines: list[str], budget: int) -> None:
    text = "\n".join(lines)
    result = truncate_previous_observations(text, budget, words)
    if not result.was_truncated:
        assert result.text == text
    else:
        only_marker = re.fullmatch(r"\[\d+ observations truncated here\]", result.text)
        assert words(result.text) <= budget or only_marker
        # a lone hidden line is shown rather than replaced, except when nothing at all fits
        assert only_marker or "[1 observations truncated here]" not in result.text


# Context optimisation (docs/semantics.md, The observation log and its dates)

NOW = datetime(2023, 5, 20, 12, 0, tzinfo=UTC)


def test_optimize_removes_the_low_priority_markers_and_keeps_their_lines_and_sub_bullets() -> None:
    # the 🟡/🟢 emoji goes with the whitespace after it; the line and what is indented under it stay
    text = "\n".join(
        [
            "Date: May 15, 2023",
            "* 🔴 (10:00) [O12] User  likes [preference, drink] tea -> green tea, see [docs](https://x.y)",
            "* 🟡 (10:05) Assistant compared three kettles for the user",
            "  * -> the glass one holds 1.7 litres",
            "* ✅ (10:10) [3 items collapsed] User finished setup",
            "",
            "",
            "",
            "Date: May 16, 2023",
            "* 🟢 (11:00) User mentioned the kettle whistles",
        ]
    )
    assert optimize_observations_for_context(text, NOW) == (
        "Date: May 15, 2023 (5 days ago)\n"
        "* 🔴 (10:00) User likes tea green tea, see [docs](https://x.y)\n"
        "* (10:05) Assistant compared three kettles for the user\n"
        " * the glass one holds 1.7 litres\n"
        "* ✅ (10:10) [3 items collapsed] User finished setup\n"
        "\n"
        "Date: May 16, 2023 (4 days ago)\n"
        "* (11:00) User mentioned the kettle whistles"
    )


def test_optimize_strips_anchor_ids_only_where_they_open_a_line() -> None:
    text = "* 🔴 [O3] (09:00) User's locker is 14\n  [O3-N1] * code 4471"
    assert optimize_observations_for_context(text, NOW) == "* 🔴 (09:00) User's locker is 14\n * code 4471"


def test_optimize_adds_gap_lines_between_distant_date_groups() -> None:
    text = "Date: Mar 1, 2023\n* 🔴 a\nDate: Mar 2, 2023\n* 🔴 b\nDate: Mar 20, 2023\n* 🔴 c"
    assert optimize_observations_for_context(text, NOW).split("\n") == [
        "Date: Mar 1, 2023 (2 months ago)",
        "* 🔴 a",
        "Date: Mar 2, 2023 (2 months ago)",
        "* 🔴 b",
        "",
        "[2 weeks later]",
        "",
        "Date: Mar 20, 2023 (2 months ago)",
        "* 🔴 c",
    ]


def test_optimize_expands_resolved_dates_and_flags_past_plans() -> None:
    text = (
        "Date: May 10, 2023\n"
        "* 🔴 (10:00) User will fly to Rome on Friday (meaning May 12, 2023)\n"
        "* 🔴 (10:01) User bought shoes (meaning May 9, 2023)\n"
        "* 🔴 (10:02) User plans to visit Porto (estimated May 27, 2023)\n"
        "* 🔴 (10:03) Something (meaning sometime soon)"
    )
    lines = optimize_observations_for_context(text, NOW).split("\n")
    assert lines[1].endswith("(meaning May 12, 2023 - 1 week ago, likely already happened)")
    assert lines[2].endswith("(meaning May 9, 2023 - 1 week ago)")
    assert lines[3].endswith("(estimated May 27, 2023 - in 1 week)")
    assert lines[4].endswith("(meaning sometime soon)")


def test_optimize_reads_ranges_and_vague_dates_in_notes_as_mastra_does() -> None:
    text = (
        "* 🔴 User will repaint the shed (estimated May 27-28, 2023)\n"
        "* 🔴 User moved flats (estimated late April 2023)\n"
        "* 🔴 User wants to plant beans (estimated April to May 2023)"
    )
    lines = optimize_observations_for_context(text, NOW).split("\n")
    assert lines[0].endswith("(estimated May 27-28, 2023 - in 1 week)")
    assert lines[1].endswith("(estimated late April 2023 - 3 weeks ago)")
    assert lines[2].endswith("(estimated April to May 2023 - 2 weeks ago, likely already happened)")


# Retrieval groups, slices, resource-scope sections


def test_groups_wrap_render_and_strip() -> None:
    group_id = observation_group_id("cycle-1")
    assert len(group_id) == 16 and group_id == observation_group_id("cycle-1")
    wrapped = wrap_observation_group("* 🔴 a\n", group_id, "m1", "m9")
    assert wrapped == f'<observation-group id="{group_id}" range="m1:m9">\n* 🔴 a\n</observation-group>'
    log = wrapped + "\n\n" + wrap_observation_group("* 🔴 b", "f" * 16, "m10", "m12", kind="reflection")
    assert render_groups_for_context(log) == (
        f"## Group `{group_id}`\n_range: `m1:m9`_\n\n* 🔴 a\n\n"
        f"## Group `{'f' * 16}`\n_range: `m10:m12`_\n\n* 🔴 b"
    )
    assert strip_group_tags(log) == "* 🔴 a\n\n* 🔴 b\n"


def test_a_truncation_marker_is_recognised_as_written_and_only_as_a_whole_line() -> None:
    assert is_truncation_marker(truncation_marker(37))
    assert not is_truncation_marker(f"* 🔴 (12:00) {truncation_marker(3)}")
    assert not is_truncation_marker("[many observations truncated here]")
