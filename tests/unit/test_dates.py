from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from om_core.domain.dates import (
    format_clock_12h,
    format_gap_between_dates,
    format_relative_time,
    format_temporal_gap,
    format_transcript_date,
    parse_date_text,
    temporal_gap_marker,
)

BASE = date(2023, 5, 15)
MINUTE = 60_000


@pytest.mark.parametrize(
    ("days", "expected"),
    [
        (0, None),
        (1, None),
        (3, "[3 days later]"),
        (10, "[1 week later]"),
        (20, "[2 weeks later]"),
        (45, "[1 month later]"),
        (90, "[3 months later]"),
        (400, "[13 months later]"),
    ],
)
def test_gap_between_dates_scenario_34(days: int, expected: str | None) -> None:
    assert format_gap_between_dates(BASE, BASE + timedelta(days=days)) == expected


@pytest.mark.parametrize(
    ("offset_days", "expected"),
    [
        (0, "today"),
        (1, "yesterday"),
        (5, "5 days ago"),
        (10, "1 week ago"),
        (-1, "tomorrow"),
        (-3, "in 3 days"),
        (60, "2 months ago"),
        (800, "2 years ago"),
    ],
)
def test_relative_time_scenario_34(offset_days: int, expected: str) -> None:
    now = datetime(2023, 5, 20, 18, 0, tzinfo=UTC)
    assert format_relative_time(now.date() - timedelta(days=offset_days), now) == expected


def test_relative_time_counts_calendar_days_not_elapsed_hours() -> None:
    now = datetime(2023, 5, 20, 0, 5, tzinfo=UTC)
    assert format_relative_time(datetime(2023, 5, 19, 23, 55, tzinfo=UTC), now) == "yesterday"


@pytest.mark.parametrize(
    ("minutes", "expected"),
    [
        (9, None),
        (10, "10 minutes later"),
        (45, "45 minutes later"),
        (90, "1 hour 30 minutes later"),
        (120, "2 hours later"),
        (60 * 24 * 3 + 60 * 5, "3 days 5 hours later"),
        (60 * 24 * 10, "1 week 3 days later"),
        (60 * 24 * 45, "1 month 2 weeks later"),
        (60 * 24 * 400, "1 year 1 month later"),
    ],
)
def test_temporal_gap_unit_ladder(minutes: int, expected: str | None) -> None:
    assert format_temporal_gap(minutes * MINUTE) == expected


def test_temporal_gap_marker_states_gap_and_local_wall_clock() -> None:
    before = datetime(2023, 5, 15, 12, 0, tzinfo=UTC)
    after = before + timedelta(minutes=90)
    assert temporal_gap_marker(before, after) == "1 hour 30 minutes later — 05/15/2023, 1:30 PM UTC"
    new_york = temporal_gap_marker(before, after, ZoneInfo("America/New_York"))
    assert new_york == "1 hour 30 minutes later — 05/15/2023, 9:30 AM EDT"


def test_temporal_gap_marker_none_below_ten_minutes() -> None:
    before = datetime(2023, 5, 15, 12, 0, tzinfo=UTC)
    assert temporal_gap_marker(before, before + timedelta(minutes=9, seconds=59)) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Date: May 15, 2023", date(2023, 5, 15)),
        ("meaning September 3rd, 2024", date(2024, 9, 3)),
        ("15 May 2023", date(2023, 5, 15)),
        ("on 2023-05-15", date(2023, 5, 15)),
        ("Feb 30, 2023", None),
        ("next week", None),
    ],
)
def test_parse_date_text(text: str, expected: date | None) -> None:
    assert parse_date_text(text) == expected


def test_date_formats() -> None:
    moment = datetime(2023, 5, 5, 0, 7, tzinfo=UTC)
    assert format_transcript_date(moment) == "May 5 2023"
    assert format_clock_12h(moment) == "12:07 AM"
    assert format_clock_12h(moment.replace(hour=13)) == "1:07 PM"
