"""Pure transformations of the observation log text.

Nothing here rewrites the stored log: these functions derive what a model sees (the Observer's budgeted
view, the actor's optimised view) or tag parts of it (retrieval groups).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal

from om_core.domain.dates import (
    format_gap_between_dates,
    format_relative_time,
    parse_date_text,
)

_DATE_HEADER = re.compile(r"^\s*Date:\s*(?P<date>.+?)\s*$")
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])?\s*")
# What the context leaves out of each line, as Mastra's regular expressions have it: an anchor id opening a
# line (its indentation stays), a 🟡/🟢 marker with the whitespace after it, a bracketed tag other than a
# collapsed-items marker or a markdown link's text, an arrow with the whitespace around it.
_ANCHOR_AT_LINE_START = re.compile(r"(^|\n)([^\S\n]*)\[O\d+(?:-N\d+)?\][^\S\n]*")
_LOW_PRIORITY_MARKER = re.compile(r"[🟡🟢]\s*")
_TAG = re.compile(r"\[(?![\d\s]*items collapsed)[^\]]+\](?!\()")
_ARROW = re.compile(r"\s*->\s*")
_SPACES = re.compile(r"  +")
_MANY_NEWLINES = re.compile(r"\n{3,}")
_CONTEXT_DATE_HEADER = re.compile(r"^(?P<prefix>Date:\s*)(?P<date>[A-Z][a-z]+ \d{1,2}, \d{4})$", re.M)
_RESOLVED_DATE = re.compile(r"\((?P<kind>estimated|meaning)\s+(?P<body>[^)]+\d{4})\)", re.I)
_SIMPLE_DATE = re.compile(r"(?P<month>[A-Z][a-z]+)\s+(?P<day>\d{1,2}),?\s+(?P<year>\d{4})")
_DAY_RANGE = re.compile(r"(?P<month>[A-Z][a-z]+)\s+(?P<day>\d{1,2})-\d{1,2},?\s+(?P<year>\d{4})")
_VAGUE_MONTH = re.compile(
    r"(?P<modifier>late|early|mid)[- ]?(?:to[- ]?(?:late|early|mid)[- ]?)?"
    r"(?P<month>[A-Z][a-z]+)\s+(?P<year>\d{4})",
    re.I,
)
_MONTH_SPAN = re.compile(r"[A-Z][a-z]+\s+to\s+(?:early\s+)?(?P<month>[A-Z][a-z]+)\s+(?P<year>\d{4})", re.I)
_FUTURE_INTENT = re.compile(
    r"\bwill\s+(?:be\s+)?\w+|\bplans?\s+to\b|\bplanning\s+to\b|\blooking\s+forward\s+to\b|"
    r"\bgoing\s+to\b|\bintends?\s+to\b|\bwants?\s+to\b|\bneeds?\s+to\b|\babout\s+to\b",
    re.I,
)
_GROUP = re.compile(
    r"<observation-group\b(?P<attrs>[^>]*)>\n?(?P<body>.*?)\n?</observation-group>", re.DOTALL
)
_GROUP_TAG_LINE = re.compile(r"^[ \t]*</?observation-group\b[^>]*>[ \t]*\n?", re.MULTILINE)
_GROUP_TAG = re.compile(r"</?observation-group\b[^>]*>")
_ATTRIBUTE = re.compile(r'(?P<name>[\w-]+)="(?P<value>[^"]*)"')

IMPORTANT_MARKERS = ("🔴", "✅")


_TRUNCATION_MARKER_TEXT = "[{count} observations truncated here]"
_TRUNCATION_MARKER = re.compile(re.escape(_TRUNCATION_MARKER_TEXT).replace(re.escape("{count}"), r"\d+"))


def truncation_marker(count: int) -> str:
    return _TRUNCATION_MARKER_TEXT.format(count=count)


def is_truncation_marker(line: str) -> bool:
    """Whether ``line`` (stripped) is what ``truncation_marker`` writes in place of hidden lines."""
    return _TRUNCATION_MARKER.fullmatch(line) is not None


@dataclass(frozen=True, slots=True)
class TruncationResult:
    text: str
    was_truncated: bool


def _marker_of(line: str) -> str:
    """The text of an observation line after its list marker, where its priority emoji sits."""
    return _LIST_MARKER.sub("", line, count=1)


def _is_important(line: str) -> bool:
    return _marker_of(line).startswith(IMPORTANT_MARKERS)


def _is_date_header(line: str) -> bool:
    return _DATE_HEADER.match(line) is not None


class _Budgeter:
    """Token accounting for one truncation: per-line costs and the cost of hidden runs.

    Costs are summed per line (each with its newline) so thousands of candidate layouts can be compared
    without tokenizing each; the chosen layout is then measured for real.
    """

    def __init__(self, lines: list[str], count_tokens: Callable[[str], int]) -> None:
        self.lines = lines
        self.count_tokens = count_tokens
        self.cost = [count_tokens(line + "\n") for line in lines]
        self.cost_prefix = [0]
        self.visible_prefix = [0]
        for line, cost in zip(lines, self.cost, strict=True):
            self.cost_prefix.append(self.cost_prefix[-1] + cost)
            self.visible_prefix.append(self.visible_prefix[-1] + (1 if line.strip() else 0))
        self._marker_cost: dict[int, int] = {}

    def visible(self, start: int, end: int) -> int:
        return self.visible_prefix[end] - self.visible_prefix[start]

    def run_cost(self, start: int, end: int) -> int:
        """Cost of hiding lines [start, end): a marker, or the lines themselves when at most one shows."""
        hidden = self.visible(start, end)
        if hidden <= 1:
            return self.cost_prefix[end] - self.cost_prefix[start]
        if hidden not in self._marker_cost:
            self._marker_cost[hidden] = self.count_tokens(truncation_marker(hidden) + "\n")
        return self._marker_cost[hidden]

    def add_delta(self, kept: list[int], index: int, region_end: int) -> int:
        position = bisect.bisect_left(kept, index)
        before = kept[position - 1] + 1 if position > 0 else 0
        after = kept[position] if position < len(kept) else region_end
        return (
            self.cost[index]
            + self.run_cost(before, index)
            + self.run_cost(index + 1, after)
            - self.run_cost(before, after)
        )

    def render(self, kept: list[int], tail_start: int) -> str:
        out: list[str] = []
        previous = 0
        for index in [*kept, tail_start]:
            if index > previous:
                hidden = self.visible(previous, index)
                if hidden <= 1:
                    out.extend(self.lines[previous:index])
                else:
                    out.append(truncation_marker(hidden))
            if index < tail_start:
                out.append(self.lines[index])
            previous = index + 1
        out.extend(self.lines[tail_start:])
        return "\n".join(out)


class _Layout:
    """One candidate: a tail of newest lines plus the older lines kept, and its estimated cost."""

    def __init__(self, budgeter: _Budgeter, tail_start: int, budget: int, total: int) -> None:
        self.budgeter = budgeter
        self.tail_start = tail_start
        self.budget = budget
        self.total = total
        self.kept: list[int] = []
        self._kept_set: set[int] = set()

    def try_keep(self, indices: list[int]) -> bool:
        """Keep all of ``indices`` (older lines) if the layout still fits, else change nothing."""
        added: list[int] = []
        delta = 0
        for index in indices:
            if 0 <= index < self.tail_start and index not in self._kept_set:
                delta += self.budgeter.add_delta(self.kept, index, self.tail_start)
                bisect.insort(self.kept, index)
                self._kept_set.add(index)
                added.append(index)
        if self.total + delta <= self.budget:
            self.total += delta
            return True
        for index in added:
            self.kept.remove(index)
            self._kept_set.discard(index)
        return False


def truncate_previous_observations(
    text: str, budget: int | Literal[False] | None, count_tokens: Callable[[str], int]
) -> TruncationResult:
    """The part of the log the Observer is shown, within ``budget`` tokens.

    ``None``/``False`` show everything and 0 shows nothing. Over budget: a tail of the newest lines plus as
    many older 🔴/✅ lines (newest first, each with its ``Date:`` header) as fit, never more important
    lines than tail lines; hidden runs collapse to ``[N observations truncated here]``, except a single
    hidden line, which is cheaper shown than replaced. The layout keeping the most important lines wins,
    then the one with the longest tail. When nothing fits, only the marker is returned.
    """
    if budget is None or budget is False:
        return TruncationResult(text, False)
    if budget <= 0:
        return TruncationResult("", bool(text.strip()))
    if count_tokens(text) <= budget:
        return TruncationResult(text, False)

    lines = text.split("\n")
    budgeter = _Budgeter(lines, count_tokens)
    header_of: list[int] = []
    current_header = -1
    for index, line in enumerate(lines):
        if _is_date_header(line):
            current_header = index
        header_of.append(current_header)
    important = [index for index, line in enumerate(lines) if _is_important(line)]

    cheapest_important = max(1, min((budgeter.cost[index] for index in important), default=1))
    best_important = 0
    candidates: list[tuple[int, int, list[int]]] = []
    for tail_length in range(1, len(lines)):
        tail_start = len(lines) - tail_length
        tail_cost = budgeter.cost_prefix[-1] - budgeter.cost_prefix[tail_start]
        if tail_cost > budget:
            break
        allowed = budgeter.visible(tail_start, len(lines))
        older_important = bisect.bisect_left(important, tail_start)
        # a layout that cannot keep as many important lines as the best so far cannot win
        ceiling = min(allowed, older_important, (budget - tail_cost) // cheapest_important)
        if not lines[tail_start].strip() or ceiling < best_important:
            continue
        layout = _Layout(budgeter, tail_start, budget, tail_cost + budgeter.run_cost(0, tail_start))
        layout.try_keep([header_of[tail_start]])
        kept_important = 0
        for index in reversed(important[:older_important]):
            if kept_important >= allowed:
                break
            if layout.try_keep([header_of[index], index]):
                kept_important += 1
        if layout.total <= budget:
            candidates.append((kept_important, tail_length, layout.kept))
            best_important = max(best_important, kept_important)

    candidates.sort(key=lambda candidate: (candidate[0], candidate[1]), reverse=True)
    for _, tail_length, kept in candidates:
        rendered = budgeter.render(kept, len(lines) - tail_length)
        if count_tokens(rendered) <= budget:
            return TruncationResult(rendered, True)
    return TruncationResult(truncation_marker(budgeter.visible(0, len(lines))), True)


def _clean_for_context(text: str) -> str:
    """Mastra's ``optimizeObservationsForContext``, step by step: anchors, the 🟡/🟢 markers (the line's
    text stays), ``[label]`` tags, arrows, runs of spaces and of blank lines."""
    text = _ANCHOR_AT_LINE_START.sub(r"\1\2", text)
    text = _LOW_PRIORITY_MARKER.sub("", text)
    text = _TAG.sub("", text)
    text = _ARROW.sub(" ", text)
    text = _SPACES.sub(" ", text)
    return _MANY_NEWLINES.sub("\n\n", text).strip()


def _inline_date(body: str) -> date | None:
    """The day a ``(meaning …)``/``(estimated …)`` note names: a date, the first day of a range, the
    7th/15th/23rd of an early/mid/late month, or the first of the second month of a cross-month span."""
    found = _SIMPLE_DATE.search(body) or _DAY_RANGE.search(body)
    if found is not None:
        return _calendar_date(found["month"], int(found["day"]), int(found["year"]))
    vague = _VAGUE_MONTH.search(body)
    if vague is not None:
        day = {"early": 7, "late": 23}.get(vague["modifier"].lower(), 15)
        return _calendar_date(vague["month"], day, int(vague["year"]))
    span = _MONTH_SPAN.search(body)
    if span is not None:
        return _calendar_date(span["month"], 1, int(span["year"]))
    return None


def _calendar_date(month: str, day: int, year: int) -> date | None:
    return parse_date_text(f"{month} {day}, {year}")


def _expand_resolved_dates(text: str, today: date) -> str:
    def expand(match: re.Match[str]) -> str:
        resolved = _inline_date(match["body"])
        if resolved is None:
            return match.group(0)
        note = format_relative_time(resolved, today)
        # the intent is read in the line's text before the note; a day is past from its first moment
        line_before = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
        if resolved <= today and _FUTURE_INTENT.search(line_before):
            note += ", likely already happened"
        return f"({match['kind']} {match['body']} - {note})"

    return _RESOLVED_DATE.sub(expand, text)


def _add_relative_time(text: str, today: date) -> str:
    """Mastra's ``addRelativeTimeToObservations``: inline notes, then each ``Date:`` header with its
    distance from today and, before it, a gap line when it is far from the header before it."""
    text = _expand_resolved_dates(text, today)
    out: list[str] = []
    last = 0
    previous: date | None = None
    for header in _CONTEXT_DATE_HEADER.finditer(text):
        day = parse_date_text(header["date"])
        if day is None:
            continue
        out.append(text[last : header.start()])
        gap = format_gap_between_dates(previous, day) if previous is not None else None
        if gap is not None:
            out.append(f"\n{gap}\n\n")
        out.append(f"{header['prefix']}{header['date']} ({format_relative_time(day, today)})")
        last = header.end()
        previous = day
    out.append(text[last:])
    return "".join(out)


def optimize_observations_for_context(text: str, now: datetime) -> str:
    """The log as the actor sees it, as Mastra renders it (``optimizeObservationsForContext``, then
    ``addRelativeTimeToObservations``).

    Every line stays: the 🟡/🟢 markers go (🔴 and ✅ stay), as do anchor ids, ``[label]`` tags (not
    ``[N items collapsed…]`` markers or a markdown link's text) and ``->`` arrows; runs of spaces and of
    blank lines shrink. Then each ``Date:`` header gets its distance from today, a ``[N days later]``-style
    line goes between date groups far apart, and ``(meaning …)``/``(estimated …)`` dates get their distance
    too, flagging planned events whose date has passed as likely done. ``now`` is read in its own zone.
    """
    return _optimized_for_day(text, now.date())


# Every read renders every log segment, and a segment never changes once written: what it renders to
# changes only with the day, so one rendering per segment and day serves every read of that day.
@functools.lru_cache(maxsize=256)
def _optimized_for_day(text: str, today: date) -> str:
    return _add_relative_time(_clean_for_context(text), today)


def observation_group_id(seed: str) -> str:
    """A 16-hex-digit group id derived from ``seed`` (a cycle id), so a retried cycle reuses its id."""
    return hashlib.sha256(seed.encode("utf-8")).hexdigest()[:16]


def wrap_observation_group(
    text: str, group_id: str, start_id: str, end_id: str, *, kind: str | None = None
) -> str:
    """Retrieval mode: tag observations with the message range they came from."""
    attributes = f'id="{html.escape(group_id)}" range="{html.escape(f"{start_id}:{end_id}")}"'
    if kind is not None:
        attributes += f' kind="{html.escape(kind)}"'
    return f"<observation-group {attributes}>\n{text.strip()}\n</observation-group>"


@dataclass(frozen=True, slots=True)
class ObservationGroup:
    group_id: str
    range_start: str
    range_end: str
    text: str


def observation_groups(text: str) -> list[ObservationGroup]:
    """The retrieval groups of an observation block, in order, each with its range and content."""
    groups: list[ObservationGroup] = []
    for match in _GROUP.finditer(text):
        attributes = {a["name"]: html.unescape(a["value"]) for a in _ATTRIBUTE.finditer(match["attrs"])}
        start, _, end = attributes.get("range", "").partition(":")
        if not attributes.get("id") or not start:
            continue
        groups.append(
            ObservationGroup(
                group_id=attributes["id"],
                range_start=start,
                range_end=end or start,
                text=match["body"].strip(),
            )
        )
    return groups


def render_groups_for_context(text: str) -> str:
    """Group tags as markdown the actor can cite to the recall tool: a ``## Group`` heading and its range."""

    def render(match: re.Match[str]) -> str:
        attributes = {a["name"]: html.unescape(a["value"]) for a in _ATTRIBUTE.finditer(match["attrs"])}
        heading = f"## Group `{attributes.get('id', '')}`"
        if "range" in attributes:
            heading += f"\n_range: `{attributes['range']}`_"
        return f"{heading}\n\n{match['body'].strip()}"

    return _GROUP.sub(render, text)


def strip_group_tags(text: str) -> str:
    """The log without retrieval-group tags (what the Reflector reads); the content stays."""
    return _GROUP_TAG.sub("", _GROUP_TAG_LINE.sub("", text))
