"""Running the Observer: transcript in, parsed observations and extracted values out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from om_core.application.ports import ModelError, ModelGateway, ModelRequest, ModelResponse
from om_core.application.records import counter_for
from om_core.domain import thresholds
from om_core.domain.config import Extractor, MemoryConfig
from om_core.domain.events import Usage
from om_core.domain.message_input import message_from_json
from om_core.domain.observation_log import truncate_previous_observations
from om_core.domain.observer_output import (
    detect_degenerate_repetition,
    parse_observer_output,
    validate_extracted_value,
)
from om_core.domain.prompts import ExtractorSpec, build_extractor_request, build_observer_request
from om_core.domain.state import RecordState, WindowMessage
from om_core.domain.transcript import format_transcript

BUFFERED_SEPARATOR = "--- BUFFERED (pending activation) ---"
DEGENERATE_ATTEMPTS = 2


class ObserverFailedError(RuntimeError):
    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


@dataclass(frozen=True)
class ObservationResult:
    observations: str
    observation_tokens: int
    last_observed_at: str
    current_task: str | None
    suggested_response: str | None
    thread_title: str | None
    extracted: dict[str, Any]
    extraction_failures: dict[str, Any]
    usage: Usage


@dataclass
class UsageTally:
    """Token usage and cost over every model call of one cycle."""

    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: float = 0.0
    calls: int = 0

    def add(self, response: ModelResponse) -> None:
        self.model = response.model
        self.input_tokens += response.usage.input_tokens
        self.output_tokens += response.usage.output_tokens
        if response.usage.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + response.usage.cost_usd
        self.latency_ms += response.latency_ms
        self.calls += response.attempts

    def usage(self) -> Usage:
        return Usage(
            model=self.model,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=self.cost_usd,
            latency_ms=round(self.latency_ms, 3),
            calls=max(self.calls, 1),
        )


def extractor_specs(extractors: Sequence[Extractor]) -> list[ExtractorSpec]:
    return [
        ExtractorSpec(
            slug=e.name,
            name=e.name,
            instructions=e.instructions,
            schema=e.schema_,
            include_previous=e.include_previous_extraction,
        )
        for e in extractors
    ]


def previous_observations(state: RecordState, *, include_chunks: bool) -> str:
    """What the Observer is shown as already known: the log (with a buffered reflection standing in for
    the lines it condenses) and, for a buffer run, the chunks waiting for activation."""
    lines = state.log_lines()
    if state.buffered_reflection is not None:
        lines = [state.buffered_reflection.text, *lines[state.buffered_reflection.line_count :]]
    text = "\n".join(lines).strip()
    if include_chunks and state.chunks:
        pending = "\n\n".join(c.observations for c in state.chunks)
        text = f"{text}\n\n{BUFFERED_SEPARATOR}\n\n{pending}".strip()
    return text


def observe_messages(
    models: ModelGateway,
    state: RecordState,
    config: MemoryConfig,
    messages: Sequence[WindowMessage],
    *,
    buffered: bool,
) -> ObservationResult:
    counter = counter_for(config)
    parsed_messages = [message_from_json(m.message) for m in messages]
    transcript = format_transcript(
        parsed_messages, gap_markers=config.temporal_markers, count_tokens=counter.count_text
    )
    previous = truncate_previous_observations(
        previous_observations(state, include_chunks=buffered),
        config.observation.previous_observer_tokens,
        counter.count_text,
    )
    specs = extractor_specs(config.observation.extract)
    forward_attachments = config.observation.observe_attachments is not False
    request = build_observer_request(
        transcript.text,
        previous_observations=previous.text,
        previous_truncated=previous.was_truncated,
        current_task=state.current_task,
        suggested_response=state.suggested_response,
        thread_title=state.title,
        thread_title_enabled=config.observation.thread_title,
        continuation_hints=config.observation.continuation_hints,
        extractors=specs,
        prior_values=state.extracted,
        instruction=config.observation.instruction,
        attachments=transcript.attachments if forward_attachments else (),
    )
    input_tokens = sum(m.tokens for m in messages)
    model = thresholds.resolve_model(config, "observer", input_tokens)
    settings = _settings(config, "observer")
    tally = UsageTally()
    parsed = None
    for _ in range(DEGENERATE_ATTEMPTS):
        response = models.complete(
            ModelRequest(
                model=model,
                messages=request,
                purpose="observer",
                settings=settings,
                provider_options=dict(config.observation.provider_options),
            )
        )
        tally.add(response)
        if detect_degenerate_repetition(response.text):
            continue
        parsed = parse_observer_output(
            response.text,
            inline_extractors=[s.slug for s in specs if s.inline],
            thread_title_enabled=config.observation.thread_title,
            multi_thread=False,
        )
        break
    if parsed is None:
        raise ObserverFailedError(
            f"the Observer ({model}) answered with degenerate repetition {DEGENERATE_ATTEMPTS} times",
            attempts=tally.calls,
        )
    extracted = dict(parsed.extracted)
    failures: dict[str, Any] = {}
    for spec in specs:
        if spec.inline:
            continue
        try:
            extracted[spec.slug] = _run_schema_extractor(
                models, config, model, spec, parsed.observations, transcript.text, state.extracted, tally
            )
        except (ModelError, ValueError) as exc:
            # one extractor failing never discards the observations or the other extractors
            failures[spec.slug] = str(exc)
    observations = parsed.observations.strip()
    return ObservationResult(
        observations=observations,
        observation_tokens=counter.count_text(observations) if observations else 0,
        last_observed_at=max(m.created_at for m in messages),
        current_task=parsed.current_task,
        suggested_response=parsed.suggested_response,
        thread_title=parsed.thread_title,
        extracted=extracted,
        extraction_failures=failures,
        usage=tally.usage(),
    )


def _run_schema_extractor(
    models: ModelGateway,
    config: MemoryConfig,
    model: str,
    spec: ExtractorSpec,
    observations: str,
    transcript: str,
    previous: dict[str, Any],
    tally: UsageTally,
) -> Any:
    schema = dict(spec.schema or {})
    request = build_extractor_request(
        spec,
        observations=observations,
        source="observation",
        transcript=transcript,
        previous_value=previous.get(spec.slug) if spec.include_previous else None,
    )
    response = models.complete(
        ModelRequest(
            model=model,
            messages=request,
            purpose=f"extractor:{spec.slug}",
            settings=_settings(config, "observer"),
            provider_options=dict(config.observation.provider_options),
            response_schema=schema,
        )
    )
    tally.add(response)
    try:
        value = json.loads(response.text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"extractor {spec.slug!r} did not answer with JSON: {exc}") from exc
    problems = validate_extracted_value(value, schema)
    if problems:
        raise ValueError(
            f"extractor {spec.slug!r} answered a value outside its schema: {'; '.join(problems)}"
        )
    return value


def _settings(config: MemoryConfig, role: thresholds.Role) -> dict[str, Any]:
    """The call's settings, with the configured retry bound for transient errors (``modelRetry``)."""
    settings = thresholds.resolve_model_settings(config, role).model_dump(exclude_none=True)
    settings["max_retries"] = config.model_retry.max_retries
    return settings
