"""Running the Observer: transcript in, parsed observations and extracted values out."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from om_core.application.configuration import counter_for
from om_core.application.ports import (
    ModelConfigurationError,
    ModelError,
    ModelGateway,
    ModelRequest,
    ModelResponse,
)
from om_core.domain import thresholds
from om_core.domain.config import Extractor, MemoryConfig
from om_core.domain.events import UNRECORDED_USAGE, Usage
from om_core.domain.message_input import message_from_json
from om_core.domain.observation_log import (
    TruncationResult,
    observation_group_id,
    truncate_previous_observations,
    wrap_observation_group,
)
from om_core.domain.observer_output import (
    ObserverOutput,
    ThreadObservations,
    detect_degenerate_repetition,
    parse_json_reply,
    parse_observer_output,
    validate_extracted_value,
)
from om_core.domain.prompts import ExtractorSpec, build_extractor_request, build_observer_request
from om_core.domain.state import RecordState, WindowMessage
from om_core.domain.transcript import (
    TranscriptResult,
    format_multi_thread_transcript,
    format_transcript,
    obscure_thread_id,
)

BUFFERED_SEPARATOR = "--- BUFFERED (pending activation) ---"
# an unusable answer (degenerate, or without any observation) is asked for once more, as Mastra does
OBSERVER_ATTEMPTS = 2
MAX_PARALLEL_BATCHES = 4


class ObserverFailedError(RuntimeError):
    def __init__(self, message: str, attempts: int, usage: Usage = UNRECORDED_USAGE) -> None:
        super().__init__(message)
        self.attempts = attempts
        # what every call of the cycle cost, the failed ones included: the failure event records it
        self.usage = usage


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

    def add_failure(self, error: ModelError, latency_ms: float) -> None:
        """A call that failed for good after ``error.attempts`` attempts: providers report no tokens for
        it, but it took its time and its attempts."""
        self.model = self.model or error.model
        self.latency_ms += latency_ms
        self.calls += error.attempts

    def usage(self) -> Usage:
        return Usage(
            model=self.model,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=self.cost_usd,
            latency_ms=round(self.latency_ms, 3),
            calls=max(self.calls, 1),
        )

    def failure_usage(self) -> Usage:
        """The usage of a cycle that failed: possibly no call at all (a model that cannot be called)."""
        return self.usage().model_copy(update={"calls": self.calls})


def tallied_complete(models: ModelGateway, request: ModelRequest, tally: UsageTally) -> ModelResponse:
    """``models.complete``, with the call's usage added to ``tally`` whether it succeeds or fails."""
    started = time.monotonic()
    try:
        response = models.complete(request)
    except ModelError as error:
        tally.add_failure(error, (time.monotonic() - started) * 1000)
        raise
    tally.add(response)
    return response


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
    cycle_id: str = "",
) -> ObservationResult:
    """Observe ``messages``: one Observer call in thread scope; in resource scope, the threads batched by
    ``maxTokensPerBatch`` and the batches observed in parallel, each thread's notes in its own section.

    Raises ObserverFailedError, with the usage of every call made, when the cycle failed."""
    tally = UsageTally()
    try:
        return _observe(models, state, config, messages, buffered=buffered, cycle_id=cycle_id, tally=tally)
    except (ModelError, ObserverFailedError) as exc:
        raise ObserverFailedError(str(exc), attempts=tally.calls, usage=tally.failure_usage()) from exc


def _observe(
    models: ModelGateway,
    state: RecordState,
    config: MemoryConfig,
    messages: Sequence[WindowMessage],
    *,
    buffered: bool,
    cycle_id: str,
    tally: UsageTally,
) -> ObservationResult:
    counter = counter_for(config)
    previous = truncate_previous_observations(
        previous_observations(state, include_chunks=buffered),
        config.observation.previous_observer_tokens,
        counter.count_text,
    )
    specs = extractor_specs(config.observation.extract)
    if config.scope == "resource":
        parsed, transcript_text = _observe_threads(models, state, config, messages, previous, specs, tally)
    else:
        transcript = format_transcript(
            [message_from_json(m.message) for m in messages],
            gap_markers=config.temporal_markers,
            count_tokens=counter.count_text,
        )
        transcript_text = transcript.text
        parsed = _call_observer(
            models,
            state,
            config,
            transcript,
            sum(m.tokens for m in messages),
            previous,
            specs,
            tally,
            multi_thread=False,
        )
    model = thresholds.resolve_model(config, "observer", sum(m.tokens for m in messages))
    extracted = dict(parsed.extracted)
    failures: dict[str, Any] = {}
    for spec in specs:
        if spec.inline:
            continue
        try:
            extracted[spec.slug] = run_schema_extractor(
                models,
                config,
                model,
                spec,
                role="observer",
                observations=parsed.observations,
                transcript=transcript_text,
                previous=state.extracted,
                tally=tally,
            )
        except (ModelError, ModelConfigurationError, ValueError) as exc:
            # one extractor failing never discards the observations or the other extractors
            failures[spec.slug] = str(exc)
    observations = parsed.observations.strip()
    if observations and config.retrieval is not None:
        visible = [m for m in messages if m.kind == "message"] or list(messages)
        observations = wrap_observation_group(
            observations,
            observation_group_id(cycle_id or visible[0].message_id),
            visible[0].message_id,
            visible[-1].message_id,
        )
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


def _call_observer(
    models: ModelGateway,
    state: RecordState,
    config: MemoryConfig,
    transcript: TranscriptResult,
    input_tokens: int,
    previous: TruncationResult,
    specs: list[ExtractorSpec],
    tally: UsageTally,
    *,
    multi_thread: bool,
) -> ObserverOutput:
    """One Observer call. An answer that is degenerate or holds no observation is a failed attempt: asked
    once more, then the cycle fails, so the messages stay unobserved rather than leave the window with
    nothing written for them. A transcript with nothing in it (only data parts, say) is not sent at all."""
    if not transcript.text.strip():
        return ObserverOutput("")
    forward_attachments = config.observation.observe_attachments is not False
    request = build_observer_request(
        transcript.text,
        previous_observations=previous.text,
        previous_truncated=previous.was_truncated,
        current_task=state.current_task,
        suggested_response=state.suggested_response,
        thread_title=state.title,
        thread_title_enabled=config.observation.thread_title and not multi_thread,
        continuation_hints=config.observation.continuation_hints,
        extractors=specs,
        prior_values=state.extracted,
        multi_thread=multi_thread,
        instruction=config.observation.instruction,
        attachments=transcript.attachments if forward_attachments else (),
    )
    model = thresholds.resolve_model(config, "observer", input_tokens)
    unusable: list[str] = []
    for _ in range(OBSERVER_ATTEMPTS):
        try:
            response = tallied_complete(
                models,
                ModelRequest(
                    model=model,
                    messages=request,
                    purpose="observer",
                    settings=_settings(config, "observer"),
                    provider_options=dict(config.observation.provider_options),
                ),
                tally,
            )
        except ModelConfigurationError as exc:
            # the config was accepted while the model could be called (its key was set then): a failed
            # cycle that failurePolicy answers for, not an error of the service
            raise ObserverFailedError(f"the Observer ({model}) cannot be called: {exc}", tally.calls) from exc
        if detect_degenerate_repetition(response.text):
            unusable.append("degenerate repetition")
            continue
        parsed = parse_observer_output(
            response.text,
            inline_extractors=[s.slug for s in specs if s.inline],
            thread_title_enabled=config.observation.thread_title and not multi_thread,
            multi_thread=multi_thread,
        )
        if not _observed_anything(parsed):
            unusable.append("no observations")
            continue
        return parsed
    raise ObserverFailedError(
        f"the Observer ({model}) answered {OBSERVER_ATTEMPTS} times without usable observations: "
        + ", ".join(unusable),
        attempts=tally.calls,
    )


def _observed_anything(output: ObserverOutput) -> bool:
    # a multi-thread answer may hold only empty thread sections
    if output.threads:
        return any(thread.observations.strip() for thread in output.threads)
    return bool(output.observations.strip())


def thread_batches(
    messages: Sequence[WindowMessage], max_tokens_per_batch: int
) -> list[list[tuple[str, list[WindowMessage]]]]:
    """Threads in the order of their oldest message, packed into consecutive batches of at most
    ``max_tokens_per_batch`` tokens; a thread larger than that is a batch of its own."""
    by_thread: dict[str, list[WindowMessage]] = {}
    for message in messages:
        by_thread.setdefault(message.thread_id or "", []).append(message)
    batches: list[list[tuple[str, list[WindowMessage]]]] = []
    current: list[tuple[str, list[WindowMessage]]] = []
    size = 0
    for thread, items in by_thread.items():
        tokens = sum(m.tokens for m in items)
        if current and size + tokens > max_tokens_per_batch:
            batches.append(current)
            current, size = [], 0
        current.append((thread, items))
        size += tokens
    if current:
        batches.append(current)
    return batches


def _observe_threads(
    models: ModelGateway,
    state: RecordState,
    config: MemoryConfig,
    messages: Sequence[WindowMessage],
    previous: TruncationResult,
    specs: list[ExtractorSpec],
    tally: UsageTally,
) -> tuple[ObserverOutput, str]:
    counter = counter_for(config)
    shown = {
        (m.thread_id or ""): obscure_thread_id(m.thread_id or "")
        if config.obscure_thread_ids
        else m.thread_id or ""
        for m in messages
    }
    batches = thread_batches(messages, config.observation.max_tokens_per_batch)

    def observe(batch: list[tuple[str, list[WindowMessage]]]) -> tuple[ObserverOutput, str]:
        transcript = format_multi_thread_transcript(
            [(shown[thread], [message_from_json(m.message) for m in items]) for thread, items in batch],
            gap_markers=config.temporal_markers,
            count_tokens=counter.count_text,
        )
        tokens = sum(m.tokens for _, items in batch for m in items)
        output = _call_observer(
            models, state, config, transcript, tokens, previous, specs, tally, multi_thread=True
        )
        return output, transcript.text

    with ThreadPoolExecutor(max_workers=min(len(batches), MAX_PARALLEL_BATCHES)) as pool:
        results = list(pool.map(observe, batches))
    sections: list[str] = []
    hints: dict[str, ThreadObservations] = {}
    for output, _ in results:
        threads = output.threads or (ThreadObservations(thread_id="", observations=output.observations),)
        for thread in threads:
            if thread.observations.strip():
                sections.append(f'<thread id="{thread.thread_id}">\n{thread.observations.strip()}\n</thread>')
            hints[thread.thread_id] = thread
    newest = shown.get(messages[-1].thread_id or "", "")
    latest = hints.get(newest)
    combined = ObserverOutput(
        observations="\n\n".join(sections),
        current_task=latest.current_task if latest else None,
        suggested_response=latest.suggested_response if latest else None,
        extracted={k: v for output, _ in results for k, v in output.extracted.items()},
    )
    return combined, "\n\n".join(text for _, text in results)


def run_schema_extractor(
    models: ModelGateway,
    config: MemoryConfig,
    model: str,
    spec: ExtractorSpec,
    *,
    role: thresholds.Role,
    observations: str,
    transcript: str | None,
    previous: Mapping[str, Any],
    tally: UsageTally,
) -> Any:
    """One schema extractor's structured-output call, with the model, settings and provider options of
    the role it follows (the Observer's or the Reflector's). ValueError when the answer is not JSON or
    lies outside the schema."""
    schema = dict(spec.schema or {})
    request = build_extractor_request(
        spec,
        observations=observations,
        source="observation" if role == "observer" else "reflection",
        transcript=transcript,
        previous_value=previous.get(spec.slug) if spec.include_previous else None,
    )
    role_config = config.observation if role == "observer" else config.reflection
    response = tallied_complete(
        models,
        ModelRequest(
            model=model,
            messages=request,
            purpose=f"extractor:{spec.slug}",
            settings=_settings(config, role),
            provider_options=dict(role_config.provider_options),
            response_schema=schema,
        ),
        tally,
    )
    try:
        value = parse_json_reply(response.text)
    except ValueError as exc:
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
