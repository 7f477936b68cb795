"""Date and time wording shared by the transcript, the observation log and the temporal gap markers.

Month names come from fixed tables rather than ``strftime("%b")`` so the text the models see (and the
byte-stable context built from it) never depends on the process locale. Naive datetimes are read as UTC
for the same reason: converting them with the host's local zone would make output machine-dependent.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, tzinfo

MONTHS_SHORT = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTHS_FULL = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

MIN_TEMPORAL_GAP_MS = 10 * 60 * 1000
# Messages carrying a temporal gap marker use ids with this prefix so every consumer can tell them apart
# from conversation content.
TEMPORAL_MESSAGE_ID_PREFIX = "__temporal_"

_MINUTE_MS = 60 * 1000
_HOUR_MS = 60 * _MINUTE_MS
_DAY_MS = 24 * _HOUR_MS

_MONTH_LOOKUP: dict[str, int] = {}
for _number, (_short, _full) in enumerate(zip(MONTHS_SHORT, MONTHS_FULL, strict=True), start=1):
    _MONTH_LOOKUP[_short.lower()] = _number
    _MONTH_LOOKUP[_full.lower()] = _number
_MONTH_LOOKUP["sept"] = 9

_MONTH_WORD = r"(?P<month>[A-Za-z]{3,9})\.?"
_DATE_PATTERNS = (
    re.compile(rf"\b{_MONTH_WORD}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<year>\d{{4}})\b"),
    re.compile(rf"\b(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH_WORD},?\s+(?P<year>\d{{4}})\b"),
    re.compile(r"\b(?P<year>\d{4})-(?P<month_number>\d{1,2})-(?P<day>\d{1,2})\b"),
)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def local_datetime(moment: datetime, tz: tzinfo) -> datetime:
    return _aware(moment).astimezone(tz)


def _as_date(value: date | datetime) -> date:
    return _aware(value).date() if isinstance(value, datetime) else value


def _plural(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


def format_transcript_date(value: date | datetime) -> str:
    """``May 15 2023``: the form of date header lines in the Observer's transcript."""
    day = _as_date(value)
    return f"{MONTHS_SHORT[day.month - 1]} {day.day} {day.year}"


def format_clock_12h(moment: datetime) -> str:
    """``2:05 PM`` (no leading zero on the hour), in the zone ``moment`` carries."""
    hour = moment.hour % 12 or 12
    return f"{hour}:{moment.minute:02d} {'AM' if moment.hour < 12 else 'PM'}"


def parse_date_text(text: str) -> date | None:
    """The first calendar date written in ``text`` (``May 15, 2023``, ``15 May 2023``, ``2023-05-15``)."""
    for pattern in _DATE_PATTERNS:
        for match in pattern.finditer(text):
            groups = match.groupdict()
            if groups.get("month_number") is not None:
                month: int | None = int(groups["month_number"])
            else:
                month = _MONTH_LOOKUP.get(groups["month"].lower())
            if month is None:
                continue
            try:
                return date(int(groups["year"]), month, int(groups["day"]))
            except ValueError:
                continue
    return None


def format_gap_between_dates(earlier: date | datetime, later: date | datetime) -> str | None:
    """The bracketed gap line placed between two ``Date:`` groups, or None when they are ≤ 1 day apart."""
    days = (_as_date(later) - _as_date(earlier)).days
    if days <= 1:
        return None
    if days < 7:
        return f"[{_plural(days, 'day')} later]"
    if days < 30:
        return f"[{_plural(days // 7, 'week')} later]"
    # months however far apart, as Mastra writes them
    return f"[{_plural(days // 30, 'month')} later]"


def format_relative_time(target: date | datetime, now: date | datetime) -> str:
    """How far ``target`` is from ``now`` in calendar days: ``today``, ``yesterday``, ``in 2 weeks``…"""
    days = (_as_date(now) - _as_date(target)).days
    if days == 0:
        return "today"
    if days == 1:
        return "yesterday"
    if days == -1:
        return "tomorrow"
    span = abs(days)
    if span < 7:
        amount = _plural(span, "day")
    elif span < 30:
        amount = _plural(span // 7, "week")
    elif span < 365:
        amount = _plural(span // 30, "month")
    else:
        amount = _plural(span // 365, "year")
    return f"{amount} ago" if days > 0 else f"in {amount}"


def format_temporal_gap(ms: float) -> str | None:
    """``1 hour 30 minutes later``; None below the 10-minute threshold for a gap worth marking.

    Each band names its unit and the next smaller one, flooring both, so a gap is never overstated.
    """
    if ms < MIN_TEMPORAL_GAP_MS:
        return None
    if ms < _HOUR_MS:
        return f"{_plural(max(1, round(ms / _MINUTE_MS)), 'minute')} later"
    whole = int(ms)
    days = whole // _DAY_MS
    if ms < _DAY_MS:
        parts = (whole // _HOUR_MS, "hour", (whole % _HOUR_MS) // _MINUTE_MS, "minute")
    elif days < 7:
        parts = (days, "day", (whole % _DAY_MS) // _HOUR_MS, "hour")
    elif days < 30:
        parts = (days // 7, "week", days % 7, "day")
    elif days < 365:
        parts = (days // 30, "month", (days % 30) // 7, "week")
    else:
        parts = (days // 365, "year", (days % 365) // 30, "month")
    major_count, major_unit, minor_count, minor_unit = parts
    major = _plural(major_count, major_unit)
    return f"{major} {_plural(minor_count, minor_unit)} later" if minor_count else f"{major} later"


def temporal_gap_marker(previous_at: datetime, message_at: datetime, tz: tzinfo = UTC) -> str | None:
    """The text of a gap marker placed before a message that follows ≥ 10 minutes of silence.

    ``3 hours later — 05/15/2023, 2:30 PM UTC``: the gap, then the wall-clock time of the message in the
    record's zone, so the Observer can anchor what follows without doing arithmetic.
    """
    gap = format_temporal_gap((_aware(message_at) - _aware(previous_at)).total_seconds() * 1000)
    if gap is None:
        return None
    local = local_datetime(message_at, tz)
    zone = local.tzname() or "UTC"
    return f"{gap} — {local.month:02d}/{local.day:02d}/{local.year}, {format_clock_12h(local)} {zone}"
