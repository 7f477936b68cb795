"""Where each planted fact went: the record's event stream, folded event by event, read against the
facts of ``testing.styles``.

For every fact it records whether an Observer output ever held it, whether the observation log ever did,
which reflection (if any) removed it, and whether the final log holds it; a fact missing from the final
context is then given one cause of loss (``CAUSES``). It also counts the 🔴 lines a reflection removed
while a 🟡/🟢 line of the same log survived it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from om_core.application.ports import EventStore
from om_core.domain.events import (
    ObservationOutcome,
    ReflectionActivated,
    ReflectionCompleted,
)
from om_core.domain.events import (
    from_recorded as event_of,
)
from om_core.domain.state import evolve, initial_state
from testing.styles.facts import Fact, SearchText, normalise, superseded_in

# why a fact is not in the final context, in the order they are tested
CAUSES: dict[str, str] = {
    "dropped-by-rendering": "in the final observation log, but not in the context rendered from it",
    "removed-by-reflection": "in the log until a reflection's output left it out",
    "lost-from-log": "in the log once, gone without a reflection",
    "never-activated": "in a buffered Observer output that never reached the log",
    "superseded-only": "never extracted with its new value; only a superseded value is in the context",
    "date-unresolved": "the relative phrase was kept, the date it means was not",
    "value-cut": "the Observer kept the sentence or part of the fact, without the whole value",
    "never-extracted": "no Observer output ever held it",
}
_EVENT_MARKERS = re.compile(r"^\s*(?:[-*•]|\d+[.)])?\s*(🔴|🟡|🟢|✅)\s*")
_TIME_PREFIX = re.compile(r"^\(?\d{1,2}:\d{2}\)?\s*")
_STOPWORDS = set(
    [
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "from",
        "have",
        "has",
        "was",
        "were",
        "will",
        "would",
        "just",
        "been",
        "into",
        "they",
        "them",
        "their",
        "there",
        "then",
        "than",
        "what",
        "when",
        "your",
        "yours",
        "ours",
        "about",
        "also",
        "only",
        "some",
        "more",
        "most",
        "very",
        "really",
        "here",
        "over",
        "after",
        "before",
        "like",
        "it's",
        "i'm",
        "we're",
        "that's",
        "don't",
        "going",
    ]
)


@dataclass(slots=True)
class FactTrace:
    extracted: bool = False
    in_log_ever: bool = False
    in_final_log: bool = False
    removed_by_reflection: bool = False
    outputs_for_message: list[str] = field(default_factory=list)


@dataclass(slots=True)
class StreamAnalysis:
    traces: list[FactTrace]
    red_dropped_while_lower_kept: int
    reflections: int


def _content(line: str) -> str | None:
    """A log line's priority and its words without bullet, marker and time: ("🔴", "user is …")."""
    match = _EVENT_MARKERS.match(line)
    if match is None:
        return None
    rest = _TIME_PREFIX.sub("", line[match.end() :])
    return match.group(1) + normalise(rest)


def _words(text: str) -> set[str]:
    return {w for w in text.split() if len(w) >= 3 and w not in _STOPWORDS}


def _red_dropped(before: str, after: str) -> int:
    """🔴 lines of ``before`` absent from ``after`` when a 🟡/🟢 line of ``before`` survived in it. A line
    the reflection shortened or merged survives: one line of ``after`` holds half its words or more."""
    kept = [_words(normalise(line)) for line in after.split("\n")]
    reds: list[str] = []
    lower_survived = False
    for line in before.split("\n"):
        content = _content(line)
        if content is None or len(content) < 6:
            continue
        marker, words = content[0], _words(content[1:])
        need = max(1, (len(words) + 1) // 2)
        present = bool(words) and any(len(words & other) >= need for other in kept)
        if marker == "🔴":
            if not present:
                reds.append(content)
        elif marker in ("🟡", "🟢") and present:
            lower_survived = True
    return len(reds) if lower_survived else 0


def analyse_stream(store: EventStore, stream_id: str, facts: Sequence[Fact]) -> StreamAnalysis:
    traces = [FactTrace() for _ in facts]
    watched = {f.message_id for f in facts} | {f.confirmed_in for f in facts if f.confirmed_in}
    state = initial_state(stream_id)
    red_dropped = 0
    reflections = 0
    for recorded in store.read_stream(stream_id):
        event = event_of(recorded)
        reflection = isinstance(event, ReflectionActivated | ReflectionCompleted)
        log_before = state.log_text() if reflection else ""
        # segments are appended to the list or the list is replaced (a reflection), never edited
        shape = (id(state.log), len(state.log))
        evolve(state, [event])
        if isinstance(event, ObservationOutcome):
            output = SearchText.of(event.observations)
            for fact, trace in zip(facts, traces, strict=True):
                if not trace.extracted and output.holds(fact.parts):
                    trace.extracted = True
            if watched.intersection(event.message_ids):
                for fact, trace in zip(facts, traces, strict=True):
                    if {fact.message_id, fact.confirmed_in} & set(event.message_ids):
                        trace.outputs_for_message.append(event.observations)
        if (id(state.log), len(state.log)) == shape and not reflection:
            continue
        log = SearchText.of(state.log_text())
        for fact, trace in zip(facts, traces, strict=True):
            holds = log.holds(fact.parts)
            if reflection and trace.in_final_log and not holds:
                trace.removed_by_reflection = True
            trace.in_log_ever = trace.in_log_ever or holds
            trace.in_final_log = holds
        if reflection:
            reflections += 1
            red_dropped += _red_dropped(log_before, state.log_text())
    return StreamAnalysis(traces, red_dropped, reflections)


def _source_words(fact: Fact) -> set[str]:
    value_words = {w for part in fact.parts for r in part.renderings for w in normalise(r).split()}
    return {
        w
        for w in normalise(fact.source).split()
        if len(w) >= 4 and w not in _STOPWORDS and w not in value_words and not w.isdigit()
    }


def _kept_sentence(fact: Fact, outputs: Sequence[str]) -> bool:
    """Whether an output of the cycles that read the fact's message kept part of the fact, or most of the
    words of the sentence that states it, without the whole value."""
    words = _source_words(fact)
    for output in outputs:
        search = SearchText.of(output)
        if len(fact.parts) > 1 and search.holds_some(fact.parts):
            return True
        if len(words) >= 2:
            for unit in search.units:
                if len(words & set(unit.split())) >= max(2, (len(words) * 3 + 4) // 5):
                    return True
    return False


def cause_of_loss(fact: Fact, trace: FactTrace, context: SearchText) -> str:
    if trace.in_final_log:
        return "dropped-by-rendering"
    if trace.in_log_ever:
        return "removed-by-reflection" if trace.removed_by_reflection else "lost-from-log"
    if trace.extracted:
        return "never-activated"
    if superseded_in(fact, context):
        return "superseded-only"
    if any(part.date is not None for part in fact.parts):
        phrase = f" {normalise(fact.source)} "
        if any(
            phrase in unit for output in trace.outputs_for_message for unit in SearchText.of(output).units
        ):
            return "date-unresolved"
    if _kept_sentence(fact, trace.outputs_for_message):
        return "value-cut"
    return "never-extracted"
