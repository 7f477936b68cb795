"""Reading what the Observer and the Reflector reply, and the checks applied to it.

Models wrap, forget to close, repeat and mention tags, so parsing is tolerant but literal: a tag counts only
at the start of a line and outside fenced code blocks, so observations that talk about ``</observations>``
or quote XML keep their text. Nothing here raises on model output.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from om_core.domain.events import AnswerVerdict

MAX_LINE_CHARS = 10_000
LINE_TRUNCATION_SUFFIX = "… [truncated]"

BUILT_IN_SLUGS = ("current-task", "suggested-response", "thread-title")
# the Observer's whole working-memory document, when it manages it (observation.manageWorkingMemory)
WORKING_MEMORY_TAG = "working-memory"
# every tag of the output format but the extractors' own: no extractor may take one of these names
OUTPUT_TAGS = ("observations", "extracted-values", *BUILT_IN_SLUGS, WORKING_MEMORY_TAG)

_FENCE = re.compile(r"^\s*(?:```|~~~)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+\S")
_DATE_HEADER = re.compile(r"^\s*Date:\s*\S")
_PRIORITY = re.compile(r"^\s*(?:🔴|🟡|🟢|✅)")
# list markers, priorities, "(14:30)" times and quotes, which a copy may add or leave out
_ECHO_MARKUP = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+|🔴|🟡|🟢|✅|\(\d{1,2}:\d{2}\)|[\"'`]")
# a copied line this long is a copy, not a coincidence
ECHO_MIN_CHARS = 24
_LETTER = re.compile(r"[^\W\d_]")
# what a model writes when it has nothing to say, as a list item of its own
_NOTHING = re.compile(r"\(?(?:none|nothing( new)?|n/a|no (?:new )?observations?)\)?\.?")
_ANCHOR_ID = re.compile(r"\[O\d+(?:-N\d+)?\]\s?")
_THREAD_TAG = re.compile(r"</?thread\b[^>]*>")
_ID_ATTRIBUTE = re.compile(r"""\bid\s*=\s*(?:"(?P<double>[^"]*)"|'(?P<single>[^']*)'|(?P<bare>[^\s>]+))""")

# Degeneracy thresholds: a reply shorter than the first cannot hold a loop worth rejecting; the others are
# tuned so a faithful log of many identical short tool lines passes while real generation loops do not.
DEGENERACY_MIN_CHARS = 2_000
_MAX_LINE_LENGTH = 50_000
_LONG_LINE_CHARS = 80
_MAX_BLOCK_LINES = 10
_MIN_LINE_REPEATS = 20
_MIN_BLOCK_REPEATS = 10
_WINDOW_CHARS = 200
_WINDOW_SAMPLES = 50
_MIN_DUPLICATE_LONG_LINES = 20


@dataclass(frozen=True, slots=True)
class ThreadObservations:
    """One thread's part of a multi-thread reply."""

    thread_id: str
    observations: str
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None


@dataclass(frozen=True, slots=True)
class ObserverOutput:
    observations: str
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    # inline extractor values by slug; a slug missing from both dicts was simply not emitted
    extracted: Mapping[str, str] = field(default_factory=dict)
    extraction_failures: Mapping[str, str] = field(default_factory=dict)
    threads: tuple[ThreadObservations, ...] = ()
    degenerate: bool = False
    # the updated working-memory document as written (Markdown, or JSON text); None: no update
    working_memory: str | None = None


@dataclass(frozen=True, slots=True)
class _Section:
    start: int
    end: int  # exclusive: the lines [start, end) belong to the section, tags included
    attributes: str
    content: str


class _Document:
    """Lines of a reply with fenced-code awareness; sections can be found and cut out."""

    def __init__(self, text: str) -> None:
        self.lines: list[str] = text.split("\n")
        self.fenced = _fence_mask(self.lines)

    def text(self) -> str:
        return "\n".join(self.lines)

    def _opening(self, index: int, tag: str) -> re.Match[str] | None:
        if self.fenced[index]:
            return None
        return re.match(rf"\s*<{re.escape(tag)}(?P<attrs>\s[^>]*)?>", self.lines[index])

    def _stops(self, index: int, tag: str) -> bool:
        """Whether line ``index`` opens or closes ``tag``: where an unclosed section must end."""
        if self._opening(index, tag) is not None:
            return True
        return not self.fenced[index] and self.lines[index].lstrip().startswith(f"</{tag}>")

    def _closing_line(self, opening: int, tag: str) -> int | None:
        """The line closing the section opened at ``opening``; None if the tag reopens or never closes."""
        for index in range(opening + 1, len(self.lines)):
            if self._opening(index, tag) is not None:
                return None
            if not self.fenced[index] and self.lines[index].lstrip().startswith(f"</{tag}>"):
                return index
        return None

    def find(self, tag: str, stop_tags: Sequence[str] = ()) -> list[_Section]:
        """Line-anchored ``<tag>…</tag>`` sections in order.

        The closing tag may share the opening line, or must start a later line. An unclosed section runs
        to the next line-anchored opening or closing tag of one of ``stop_tags``, or to the end.
        """
        sections: list[_Section] = []
        closing = f"</{tag}>"
        index = 0
        while index < len(self.lines):
            opening = self._opening(index, tag)
            if opening is None:
                index += 1
                continue
            rest = self.lines[index][opening.end() :]
            attributes = opening["attrs"] or ""
            if closing in rest:
                content = rest[: rest.index(closing)]
                sections.append(_Section(index, index + 1, attributes, content))
                index += 1
                continue
            body = [rest] if rest.strip() else []
            close_at = self._closing_line(index, tag)
            closed = close_at is not None
            end = index + 1
            while end < len(self.lines) and end != close_at:
                if not closed and any(self._stops(end, stop) for stop in stop_tags):
                    break
                body.append(self.lines[end])
                end += 1
            if not closed:
                while body and not body[-1].strip():
                    body.pop()
                if body and body[-1].rstrip().endswith(closing):
                    body[-1] = body[-1].rstrip()[: -len(closing)]
            sections.append(_Section(index, end + 1 if closed else end, attributes, "\n".join(body)))
            index = end + 1 if closed else end
        return sections

    def replace(self, section: _Section, lines: Sequence[str]) -> None:
        self.lines[section.start : section.end] = lines
        self.fenced[section.start : section.end] = [False] * len(lines)

    def cut(self, sections: Sequence[_Section]) -> None:
        for section in sorted(sections, key=lambda s: s.start, reverse=True):
            del self.lines[section.start : section.end]
            del self.fenced[section.start : section.end]


def _fence_mask(lines: Sequence[str]) -> list[bool]:
    """True for lines inside a fenced code block (fence lines included); an unpaired fence is ignored."""
    fences = [index for index, line in enumerate(lines) if _FENCE.match(line)]
    mask = [False] * len(lines)
    for opening, closing in zip(fences[::2], fences[1::2], strict=False):
        for index in range(opening, closing + 1):
            mask[index] = True
    return mask


def _unwrap_outer_fence(text: str) -> str:
    # Some models put their whole reply in one code block, which would hide every tag inside it. A reply
    # that already has a tag line outside code is left alone: its first and last fences are separate blocks.
    lines = text.strip().split("\n")
    if len(lines) < 2 or not _FENCE.match(lines[0]) or lines[-1].strip() not in {"```", "~~~"}:
        return text
    document = _Document(text.strip())
    if any(
        not fenced and line.lstrip().startswith("<")
        for line, fenced in zip(lines, document.fenced, strict=True)
    ):
        return text
    return "\n".join(lines[1:-1])


def _single_value(content: str) -> str | None:
    value = content.strip()
    return value or None


def _title_value(content: str) -> str | None:
    value = " ".join(content.split())
    return value or None


def _sanitize(text: str) -> str:
    lines = []
    for line in _ANCHOR_ID.sub("", text).split("\n"):
        line = line.rstrip()
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + LINE_TRUNCATION_SUFFIX
        lines.append(line)
    return "\n".join(lines).strip("\n").strip()


def _fallback_lines(text: str, whole_text: bool) -> str:
    """Observation-like lines of a reply that has no ``<observations>`` block.

    The Reflector's reply may be its condensed log written without the tags: it is kept whole, but only
    when it holds an observation at all (a list item, a date header, a priority marker). A reply such as
    "I'm ready to help" is no reflection, and taking it would replace the whole log with nothing.
    """
    document = _Document(text)
    kept = [
        line
        for line, fenced in zip(document.lines, document.fenced, strict=True)
        if not fenced and (_LIST_ITEM.match(line) or _DATE_HEADER.match(line))
    ]
    if not any(_LIST_ITEM.match(line) for line in kept):
        if whole_text and any(_LIST_ITEM.match(line) or _PRIORITY.match(line) for line in document.lines):
            return text
        return ""
    return "\n".join(kept)


def _echo_key(line: str) -> str:
    """A line's words, without its list marker, priority, time and case: what two copies share."""
    return " ".join(_ECHO_MARKUP.sub(" ", line).lower().split())


def _without_echoes(text: str, instructions: str) -> str:
    """``text`` less what is no observation: an item that says nothing (a bare marker or time, "(none)",
    "N/A"), and a line that copies the instructions the
    model was given (their format rules, their examples), since a small model repeats its prompt and such
    a line says nothing about the conversation. Short lines may well be said in both, and are kept."""
    source = "\n".join(_echo_key(line) for line in instructions.split("\n")) if instructions else ""
    kept = []
    for line in text.split("\n"):
        key = _echo_key(line)
        item = bool(_LIST_ITEM.match(line) or _PRIORITY.match(line))
        if item and (not _LETTER.search(key) or _NOTHING.fullmatch(key)):
            continue
        if source and len(key) >= ECHO_MIN_CHARS and key in source:
            continue
        kept.append(line)
    return "\n".join(kept)


def _strip_thread_tags(text: str) -> str:
    document = _Document(text)
    kept: list[str] = []
    for line, fenced in zip(document.lines, document.fenced, strict=True):
        if fenced or not _THREAD_TAG.search(line):
            kept.append(line)
            continue
        remainder = _THREAD_TAG.sub("", line)
        if remainder.strip():
            kept.append(remainder)
    return "\n".join(kept)


def _thread_id(attributes: str) -> str | None:
    match = _ID_ATTRIBUTE.search(attributes)
    if match is None:
        return None
    return html.unescape(match["double"] or match["single"] or match["bare"] or "") or None


@dataclass
class _Hints:
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None


def _take_hints(document: _Document, stop_tags: Sequence[str]) -> _Hints:
    """Cut the continuation-hint sections out of ``document``, keeping the first of each."""
    found: dict[str, str | None] = {}
    for tag in BUILT_IN_SLUGS:
        sections = document.find(tag, stop_tags)
        if sections:
            found[tag] = (_title_value if tag == "thread-title" else _single_value)(sections[0].content)
        document.cut(sections)
    return _Hints(found.get("current-task"), found.get("suggested-response"), found.get("thread-title"))


def _extracted_values(
    document: _Document, slugs: Sequence[str], stop_tags: Sequence[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Custom inline values (JSON object or last ``<slug>`` section) and built-in ones (JSON only)."""
    values: dict[str, str] = {}
    failures: dict[str, str] = {}
    json_slugs = [*BUILT_IN_SLUGS, *slugs]
    blocks = document.find("extracted-values", stop_tags)
    document.cut(blocks)
    if blocks:
        try:
            payload = parse_json_reply(blocks[-1].content)
        except ValueError as error:
            payload = None
            for slug in json_slugs:
                failures[slug] = f"<extracted-values> is not valid JSON: {error}"
        if payload is not None and not isinstance(payload, dict):
            for slug in json_slugs:
                failures[slug] = "<extracted-values> must be a JSON object"
        elif isinstance(payload, dict):
            for slug in json_slugs:
                if slug not in payload or payload[slug] is None:
                    continue
                if isinstance(payload[slug], str):
                    if payload[slug].strip():
                        values[slug] = payload[slug].strip()
                else:
                    failures[slug] = f"expected a string, got {type(payload[slug]).__name__}"
    for slug in slugs:
        sections = document.find(slug, stop_tags)
        document.cut(sections)
        if sections and slug not in values:
            value = _single_value(sections[-1].content)
            if value is not None:
                values[slug] = value
                failures.pop(slug, None)
    return values, failures


def _take_working_memory(document: _Document, stop_tags: Sequence[str]) -> str | None:
    """Cut every ``<working-memory>`` section out of ``document``; the last one is the update. Empty or
    ``null`` means no update, as Mastra's working-memory extractor reads it."""
    sections = document.find(WORKING_MEMORY_TAG, stop_tags)
    document.cut(sections)
    if not sections:
        return None
    value = sections[-1].content.strip()
    return value if value and value.lower() != "null" else None


def parse_observer_output(
    text: str,
    *,
    inline_extractors: Sequence[str] = (),
    thread_title_enabled: bool = False,
    multi_thread: bool = False,
    reflector: bool = False,
    working_memory: bool = False,
    instructions: str = "",
) -> ObserverOutput:
    """Parse an Observer (or, with ``reflector``, a Reflector) reply.

    A degenerate reply yields empty observations with ``degenerate`` set. Inline extractor values come
    from an ``<extracted-values>`` JSON object or the last ``<slug>`` section; the built-in hints
    (current task, suggested response, thread title) from their sections or that JSON. Without any
    ``<observations>`` block the list-item lines are kept (the Reflector falls back to the whole reply).
    The Reflector's current task is never taken: it describes the past the reflection condensed. With
    ``working_memory`` the ``<working-memory>`` section is the document's update, wherever it was written
    (it is never part of the observations). Lines copying ``instructions`` (the system prompt the model was
    given) are dropped.
    """
    if detect_degenerate_repetition(text):
        return ObserverOutput("", degenerate=True)
    slugs = [slug for slug in inline_extractors if slug not in BUILT_IN_SLUGS]
    stop_tags = [*OUTPUT_TAGS, *slugs]
    document = _Document(_unwrap_outer_fence(text.replace("\r\n", "\n")))

    working = _take_working_memory(document, stop_tags) if working_memory else None
    values, failures = _extracted_values(document, slugs, stop_tags)
    blocks = document.find("observations", stop_tags)
    if not blocks and multi_thread:
        # thread blocks written without the <observations> wrapper still carry each thread's hints
        blocks = document.find("thread")
        observations = "\n\n".join("\n".join(document.lines[b.start : b.end]) for b in blocks)
    else:
        observations = "\n".join(block.content for block in blocks)
    document.cut(blocks)
    outside = _take_hints(document, stop_tags)
    if not blocks:
        observations = _fallback_lines(document.text(), whole_text=reflector)

    inner = _Document(observations)
    threads: list[ThreadObservations] = []
    if multi_thread:
        for section in reversed(inner.find("thread")):
            thread_id = _thread_id(section.attributes)
            if thread_id is None:
                continue
            thread_document = _Document(section.content)
            hints = _take_hints(thread_document, stop_tags)
            thread = ThreadObservations(
                thread_id=thread_id,
                observations=_sanitize(
                    _without_echoes(_strip_thread_tags(thread_document.text()), instructions)
                ),
                current_task=None if reflector else hints.current_task,
                suggested_response=hints.suggested_response,
                thread_title=hints.thread_title if thread_title_enabled else None,
            )
            threads.insert(0, thread)
            opening = f'<thread id="{html.escape(thread_id, quote=True)}">'
            inner.replace(section, [opening, *thread.observations.split("\n"), "</thread>"])
    inside = _take_hints(inner, stop_tags)
    observations = inner.text() if multi_thread else _strip_thread_tags(inner.text())

    def pick(built_in: str, outside_value: str | None, inside_value: str | None) -> str | None:
        return values.pop(built_in, None) or outside_value or inside_value

    current_task = pick("current-task", outside.current_task, inside.current_task)
    suggested = pick("suggested-response", outside.suggested_response, inside.suggested_response)
    title = pick("thread-title", outside.thread_title, inside.thread_title)
    for slug in BUILT_IN_SLUGS:
        failures.pop(slug, None)
    return ObserverOutput(
        observations=_sanitize(_without_echoes(observations, instructions)),
        current_task=None if reflector else current_task,
        suggested_response=suggested,
        thread_title=title if thread_title_enabled else None,
        extracted=values,
        extraction_failures=failures,
        threads=tuple(threads),
        working_memory=working,
    )


def _has_period(unit: Sequence[str], period: int) -> bool:
    return all(unit[index] == unit[index - period] for index in range(period, len(unit)))


def _looping_block(lines: Sequence[str]) -> bool:
    """A block of 1–10 lines repeated back to back, long enough in total to be a generation loop.

    Short single lines repeated are allowed: a faithful log of identical tool calls looks exactly so.
    """
    for period in range(1, _MAX_BLOCK_LINES + 1):
        needed = _MIN_LINE_REPEATS if period == 1 else _MIN_BLOCK_REPEATS
        streak = 0
        for index in range(period, len(lines) + 1):
            if index < len(lines) and lines[index] == lines[index - period]:
                streak += 1
                continue
            repeats = streak // period + 1
            unit = lines[index - streak - period : index - streak]
            streak = 0
            if repeats < needed or sum(len(line) for line in unit) <= _LONG_LINE_CHARS:
                continue
            if any(period % smaller == 0 and _has_period(unit, smaller) for smaller in range(1, period)):
                continue
            return True
    return False


def _looping_line(line: str) -> bool:
    """A very long line made of one phrase over and over: sampled windows mostly repeat."""
    step = max(1, len(line) // _WINDOW_SAMPLES)
    windows = [line[start : start + _WINDOW_CHARS] for start in range(0, len(line) - _WINDOW_CHARS + 1, step)]
    if len(windows) <= 5:
        return False
    return (len(windows) - len(set(windows))) / len(windows) > 0.4


def detect_degenerate_repetition(text: str) -> bool:
    """True when a reply looks like a generation loop rather than a summary.

    Rejected: any line over 50,000 characters; a long line that repeats one phrase; a block of up to ten
    lines (over 80 characters in total) repeated back to back (a single line 20 times, a block 10 times);
    or, among lines over 80 characters, more than half duplicates. Accepted: many identical short lines,
    which is what an honest log of a repetitive tool loop looks like.
    """
    if len(text) < DEGENERACY_MIN_CHARS:
        return False
    raw_lines = text.split("\n")
    if any(len(line) > _MAX_LINE_LENGTH for line in raw_lines):
        return True
    if any(len(line) >= DEGENERACY_MIN_CHARS and _looping_line(line) for line in raw_lines):
        return True
    lines = [line.strip() for line in raw_lines if line.strip()]
    if _looping_block(lines):
        return True
    long_lines = [line for line in lines if len(line) > _LONG_LINE_CHARS]
    if len(long_lines) < _MIN_DUPLICATE_LONG_LINES:
        return False
    duplicates = sum(count - 1 for count in Counter(long_lines).values())
    return duplicates / len(long_lines) > 0.5


def validate_compression(tokens: int, target: int) -> bool:
    """A reflection succeeds only when strictly below its target."""
    return tokens < target


def thread_title_accepted(new: str | None, current: str | None, pinned: bool) -> bool:
    """Whether a proposed title replaces the current one: ≥ 3 characters, different, not pinned."""
    if pinned or new is None:
        return False
    title = new.strip()
    return len(title) >= 3 and title != (current or "").strip()


def parse_json_reply(text: str) -> Any:
    """The JSON document in a model reply, tolerating a code fence or prose around one object."""
    body = _unwrap_outer_fence(text.strip()).strip()
    try:
        return json.loads(body)
    except json.JSONDecodeError as error:
        start, end = body.find("{"), body.rfind("}")
        if 0 <= start < end:
            try:
                return json.loads(body[start : end + 1])
            except json.JSONDecodeError:
                pass
        raise ValueError(
            f"not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
        ) from None


def validate_extracted_value(value: Any, schema: Mapping[str, Any]) -> list[str]:
    """Every way ``value`` violates the JSON Schema, as ``path: message`` lines; empty when valid."""
    validator_class = jsonschema.validators.validator_for(schema)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as error:
        return [f"invalid schema: {error.message}"]
    errors = sorted(validator_class(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    return [f"{_json_path(list(error.absolute_path))}: {error.message}" for error in errors]


def _json_path(path: list[Any]) -> str:
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)


def answer_verdict(text: str, output: ObserverOutput) -> AnswerVerdict:
    """The parser's verdict on one answer and what ``parse_observer_output`` made of it: ``parsed`` when
    it held a closed ``<observations>`` block outside code, ``repaired`` when observations were recovered
    from one that did not (a block left open, a reply in a code block, bare list items or thread blocks)."""
    if output.degenerate:
        return "degenerate"
    observed = (
        any(thread.observations.strip() for thread in output.threads)
        if output.threads
        else bool(output.observations.strip())
    )
    if not observed:
        return "empty"
    lines = text.replace("\r\n", "\n").split("\n")
    opened = False
    for line, fenced in zip(lines, _fence_mask(lines), strict=True):
        stripped = line.lstrip()
        if fenced:
            continue
        if not opened and stripped.startswith("<observations>"):
            opened = True
            stripped = stripped.removeprefix("<observations>")
        if opened and "</observations>" in stripped:
            return "parsed"
    return "repaired"
