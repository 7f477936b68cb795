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
_ANCHOR_ID = re.compile(r"\[O\d+(?:-N\d+)?\]")
# A short word-like label such as ``[tool]`` or ``[user-pref]``. Collapsed/truncated markers start with a
# digit, attachment placeholders contain ``#``/``:``, markdown links are followed by ``(``: none match.
_LABEL = re.compile(r"\[[A-Za-z][\w\- ]{1,30}\](?!\()")
_ARROW = re.compile(r"[ \t]*->[ \t]*")
_INNER_SPACES = re.compile(r"(?<=\S)[ \t]{2,}")
_MANY_NEWLINES = re.compile(r"\n{3,}")
_RESOLVED_DATE = re.compile(r"\((?P<kind>meaning|estimated)\s+(?P<body>[^()]*?)\s*\)")
_FUTURE_INTENT = re.compile(
    r"\b(?:will|plans? to|planning to|going to|needs? to|wants? to|about to|intends? to|"
    r"expects? to|hopes? to|scheduled|upcoming)\b",
    re.IGNORECASE,
)
_THREAD_OPEN = re.compile(r'^\s*<thread\s+id="(?P<id>[^"]*)"[^>]*>\s*$')
_THREAD_CLOSE = re.compile(r"^\s*</thread>\s*$")
_GROUP = re.compile(
    r"<observation-group\b(?P<attrs>[^>]*)>\n?(?P<body>.*?)\n?</observation-group>", re.DOTALL
)
_GROUP_TAG_LINE = re.compile(r"^[ \t]*</?observation-group\b[^>]*>[ \t]*\n?", re.MULTILINE)
_GROUP_TAG = re.compile(r"</?observation-group\b[^>]*>")
_ATTRIBUTE = re.compile(r'(?P<name>[\w-]+)="(?P<value>[^"]*)"')
_BOUNDARY_LINE = re.compile(r"^--- message boundary \(.*\) ---$", re.MULTILINE)

IMPORTANT_MARKERS = ("🔴", "✅")
LOW_PRIORITY_MARKERS = ("🟡", "🟢")


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


def _drop_low_priority(lines: list[str]) -> list[str]:
    """Remove 🟡/🟢 lines with their indented sub-bullets, then ``Date:`` headers left with nothing."""
    kept: list[str] = []
    dropped_indent: int | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if dropped_indent is not None and line.strip() and indent > dropped_indent:
            continue
        dropped_indent = None
        if _marker_of(line).startswith(LOW_PRIORITY_MARKERS):
            dropped_indent = indent
            continue
        kept.append(line)

    result: list[str] = []
    for index, line in enumerate(kept):
        if _is_date_header(line):
            following = next((later for later in kept[index + 1 :] if later.strip()), None)
            if following is None or _is_date_header(following) or following.lstrip().startswith(("<", "---")):
                continue
        result.append(line)
    return result


def _clean_line(line: str) -> str:
    line = _ANCHOR_ID.sub("", line)
    line = _LABEL.sub("", line)
    line = _ARROW.sub(" ", line)
    return _INNER_SPACES.sub(" ", line).rstrip()


def _expand_resolved_dates(line: str, today: date) -> str:
    def expand(match: re.Match[str]) -> str:
        resolved = parse_date_text(match["body"])
        if resolved is None:
            return match.group(0)
        note = format_relative_time(resolved, today)
        if resolved < today and _FUTURE_INTENT.search(line):
            note += ", likely already happened"
        return f"({match['kind']} {match['body']} — {note})"

    return _RESOLVED_DATE.sub(expand, line)


def optimize_observations_for_context(text: str, now: datetime) -> str:
    """The log as the actor sees it: high-signal lines only, with dates made relative to ``now``.

    Drops 🟡/🟢 lines, anchor ids, ``[label]`` tags and ``->`` arrows, tidies spacing, then annotates
    ``Date:`` headers with their distance from today, puts a ``[N days later]``-style line between date
    groups far apart, and expands ``(meaning …)``/``(estimated …)`` dates, flagging planned events whose
    date has passed as likely done. ``now`` is read in its own zone.
    """
    return _optimized_for_day(text, now.date())


# Every read renders every log segment, and a segment never changes once written: what it renders to
# changes only with the day, so one rendering per segment and day serves every read of that day.
@functools.lru_cache(maxsize=256)
def _optimized_for_day(text: str, today: date) -> str:
    lines = [_clean_line(line) for line in _drop_low_priority(text.split("\n"))]
    out: list[str] = []
    previous_date: date | None = None
    for line in lines:
        header = _DATE_HEADER.match(line)
        if _THREAD_OPEN.match(line) or _THREAD_CLOSE.match(line):
            previous_date = None
        elif header is not None:
            day = parse_date_text(header["date"])
            if day is not None:
                if previous_date is not None:
                    gap = format_gap_between_dates(previous_date, day)
                    if gap is not None:
                        out.extend([gap, ""] if out and not out[-1] else ["", gap, ""])
                previous_date = day
                line = f"{line} ({format_relative_time(day, today)})"
        else:
            line = _expand_resolved_dates(line, today)
        out.append(line)
    return _MANY_NEWLINES.sub("\n\n", "\n".join(out)).strip()


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
