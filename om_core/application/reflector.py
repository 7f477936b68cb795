"""Running the Reflector: the compression ladder (docs/semantics.md, The compression ladder), then the
reflection's extractors."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from om_core.application.configuration import counter_for
from om_core.application.observer import (
    UsageTally,
    _settings,
    extractor_specs,
    run_schema_extractors,
    tallied_complete,
)
from om_core.application.ports import ModelConfigurationError, ModelError, ModelGateway, ModelRequest
from om_core.domain import thresholds
from om_core.domain.config import MemoryConfig
from om_core.domain.events import UNRECORDED_USAGE, Usage
from om_core.domain.observation_log import observation_group_id, strip_group_tags, wrap_observation_group
from om_core.domain.observer_output import (
    answer_verdict,
    detect_degenerate_repetition,
    parse_observer_output,
    validate_compression,
)
from om_core.domain.prompts import build_reflector_request, instructions_of


class ReflectorFailedError(RuntimeError):
    def __init__(self, message: str, levels_tried: list[int], usage: Usage = UNRECORDED_USAGE) -> None:
        super().__init__(message)
        self.levels_tried = levels_tried
        self.attempts = len(levels_tried)
        # every call of the ladder, the failed ones included: the failure event records it
        self.usage = usage


@dataclass(frozen=True)
class ReflectionResult:
    text: str
    tokens: int
    under_target: bool
    levels_tried: list[int]
    usage: Usage
    # reflection.extract values by name: inline ones from the committed answer, schema ones from their call
    extracted: dict[str, Any] = field(default_factory=dict)
    extraction_failures: dict[str, Any] = field(default_factory=dict)
    # reflection.continuationHints: a synchronous reflection's suggested response (its current task is
    # ignored, as Mastra ignores it: the Observer's, from the newest messages, is the better one)
    suggested_response: str | None = None


@dataclass(frozen=True)
class _Candidate:
    tokens: int
    text: str
    extracted: Mapping[str, str]
    failures: Mapping[str, str]
    suggested_response: str | None


def reflect_observations(
    models: ModelGateway,
    config: MemoryConfig,
    observations: str,
    *,
    target_tokens: int,
    buffered: bool,
    prior_values: Mapping[str, Any],
    start_level: int | None = None,
) -> ReflectionResult:
    """Condense ``observations`` below ``target_tokens``, trying stronger compression each attempt.

    The first attempt under the target wins. If none gets there, the smallest non-empty, non-degenerate
    candidate is committed (not the last one, as Mastra does); if every attempt is empty or degenerate,
    nothing is committed. Inline extractors are read from the committed answer; schema extractors are
    asked afterwards, one structured call each, about the reflection. An extractor that fails is reported
    in ``extraction_failures`` and costs neither the reflection nor the other extractors.

    Raises ReflectorFailedError, with the levels tried and the usage of every call made, when nothing can
    be committed.
    """
    tally = UsageTally()
    levels: list[int] = []
    try:
        return _reflect(
            models,
            config,
            observations,
            target_tokens=target_tokens,
            buffered=buffered,
            prior_values=prior_values,
            start_level=start_level,
            tally=tally,
            levels=levels,
        )
    except (ModelError, ReflectorFailedError) as exc:
        raise ReflectorFailedError(str(exc), list(levels), usage=tally.failure_usage()) from exc


def _reflect(
    models: ModelGateway,
    config: MemoryConfig,
    observations: str,
    *,
    target_tokens: int,
    buffered: bool,
    prior_values: Mapping[str, Any],
    start_level: int | None,
    tally: UsageTally,
    levels: list[int],
) -> ReflectionResult:
    counter = counter_for(config)
    source = strip_group_tags(observations)
    model = thresholds.resolve_model(config, "reflector", counter.count_text(source))
    first = thresholds.compression_start_level(model) if start_level is None else start_level
    specs = extractor_specs(config.reflection.extract)
    best: _Candidate | None = None
    for level in thresholds.compression_attempt_levels(first):
        levels.append(level)
        request = build_reflector_request(
            source,
            level=level,
            target_tokens=target_tokens,
            instruction=config.reflection.instruction,
            extractors=specs,
            prior_values=prior_values,
            buffered=buffered,
            continuation_hints=config.reflection.continuation_hints,
        )
        try:
            response = tallied_complete(
                models,
                ModelRequest(
                    model=model,
                    messages=request,
                    purpose="reflector",
                    settings=_settings(config, "reflector"),
                    provider_options=dict(config.reflection.provider_options),
                ),
                tally,
            )
        except ModelConfigurationError as exc:
            # accepted while the model could be called (its key was set then): a failed cycle, not a crash
            raise ReflectorFailedError(f"the Reflector ({model}) cannot be called: {exc}", levels) from exc
        if detect_degenerate_repetition(response.text):
            tally.verdicts.append("degenerate")
            continue
        parsed = parse_observer_output(
            response.text,
            inline_extractors=[s.slug for s in specs if s.inline],
            thread_title_enabled=False,
            multi_thread=False,
            reflector=True,
            instructions=instructions_of(request),
        )
        tally.verdicts.append(answer_verdict(response.text, parsed))
        text = parsed.observations.strip()
        if not text:
            continue
        tokens = counter.count_text(text)
        if best is None or tokens < best.tokens:
            best = _Candidate(
                tokens,
                text,
                parsed.extracted,
                parsed.extraction_failures,
                parsed.suggested_response,
            )
        if validate_compression(tokens, target_tokens):
            break
    if best is None:
        raise ReflectorFailedError(
            f"every Reflector attempt ({model}, levels {levels}) was empty or degenerate", levels
        )
    tokens, text = best.tokens, best.text
    extracted: dict[str, Any] = dict(best.extracted)
    failures: dict[str, Any] = dict(best.failures)
    run_schema_extractors(
        models,
        config,
        model,
        specs,
        role="reflector",
        observations=text,
        transcript=None,
        previous=prior_values,
        tally=tally,
        into=(extracted, failures),
    )
    if config.retrieval is not None:
        text = _as_reflection_group(text, observations)
        tokens = counter.count_text(text)
    return ReflectionResult(
        text=text,
        tokens=tokens,
        under_target=validate_compression(tokens, target_tokens),
        levels_tried=levels,
        usage=tally.usage(),
        extracted=extracted,
        extraction_failures=failures,
        suggested_response=best.suggested_response,
    )


_GROUP_RANGE = re.compile(r'<observation-group [^>]*range="([^":]*):([^"]*)"')


def _as_reflection_group(text: str, source: str) -> str:
    """Retrieval mode: the reflection spans from the first source group's start to the last one's end."""
    ranges = _GROUP_RANGE.findall(source)
    if not ranges:
        return text
    start, end = ranges[0][0], ranges[-1][1]
    return wrap_observation_group(
        text, observation_group_id(f"reflection:{start}:{end}"), start, end, kind="reflection"
    )
