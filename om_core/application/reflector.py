"""Running the Reflector: the compression ladder (docs/semantics.md, The compression ladder)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from om_core.application.configuration import counter_for
from om_core.application.observer import UsageTally, _settings, extractor_specs
from om_core.application.ports import ModelConfigurationError, ModelGateway, ModelRequest
from om_core.domain import thresholds
from om_core.domain.config import MemoryConfig
from om_core.domain.events import Usage
from om_core.domain.observation_log import observation_group_id, strip_group_tags, wrap_observation_group
from om_core.domain.observer_output import (
    detect_degenerate_repetition,
    parse_observer_output,
    validate_compression,
)
from om_core.domain.prompts import build_reflector_request


class ReflectorFailedError(RuntimeError):
    def __init__(self, message: str, levels_tried: list[int]) -> None:
        super().__init__(message)
        self.levels_tried = levels_tried
        self.attempts = len(levels_tried)


@dataclass(frozen=True)
class ReflectionResult:
    text: str
    tokens: int
    under_target: bool
    levels_tried: list[int]
    usage: Usage


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
    nothing is committed.
    """
    counter = counter_for(config)
    source = strip_group_tags(observations)
    model = thresholds.resolve_model(config, "reflector", counter.count_text(source))
    first = thresholds.compression_start_level(model) if start_level is None else start_level
    specs = extractor_specs(config.reflection.extract)
    tally = UsageTally()
    best: tuple[int, str] | None = None
    levels: list[int] = []
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
        )
        try:
            response = models.complete(
                ModelRequest(
                    model=model,
                    messages=request,
                    purpose="reflector",
                    settings=_settings(config, "reflector"),
                    provider_options=dict(config.reflection.provider_options),
                )
            )
        except ModelConfigurationError as exc:
            # accepted while the model could be called (its key was set then): a failed cycle, not a crash
            raise ReflectorFailedError(f"the Reflector ({model}) cannot be called: {exc}", levels) from exc
        tally.add(response)
        if detect_degenerate_repetition(response.text):
            continue
        parsed = parse_observer_output(
            response.text,
            inline_extractors=[s.slug for s in specs if s.inline],
            thread_title_enabled=False,
            multi_thread=False,
            reflector=True,
        )
        text = parsed.observations.strip()
        if not text:
            continue
        tokens = counter.count_text(text)
        if best is None or tokens < best[0]:
            best = (tokens, text)
        if validate_compression(tokens, target_tokens):
            break
    if best is None:
        raise ReflectorFailedError(
            f"every Reflector attempt ({model}, levels {levels}) was empty or degenerate", levels
        )
    tokens, text = best
    if config.retrieval is not None:
        text = _as_reflection_group(text, observations)
        tokens = counter.count_text(text)
    return ReflectionResult(
        text=text,
        tokens=tokens,
        under_target=validate_compression(tokens, target_tokens),
        levels_tried=levels,
        usage=tally.usage(),
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
