"""Running the Observer: transcript in, parsed observations and extracted values out."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
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
from om_core.domain.attachments import forwarded_attachments
from om_core.domain.config import Extractor, MemoryConfig
from om_core.domain.events import UNRECORDED_USAGE, AnswerVerdict, Usage
from om_core.domain.message_input import message_from_json
from om_core.domain.observation_log import (
    TruncationResult,
    observation_group_id,
    truncate_previous_observations,
    wrap_observation_group,
)
from om_core.domain.observer_output import (
    WORKING_MEMORY_TAG,
    ObserverOutput,
    ThreadObservations,
    answer_verdict,
    detect_degenerate_repetition,
    parse_json_reply,
    parse_observer_output,
    validate_extracted_value,
)
from om_core.domain.prompts import (
    ExtractorSpec,
    WorkingMemorySpec,
    build_extractor_request,
    build_observer_request,
    instructions_of,
)
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
    # the whole updated working-memory document; None when the Observer did not change it
    working_memory: str | None = None


@dataclass
class UsageTally:
    """Token usage and cost over every model call of one cycle."""

    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: float = 0.0
    calls: int = 0
    verdicts: list[AnswerVerdict] = field(default_factory=list)

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
            verdicts=tuple(self.verdicts),
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
            slug=e.slug,
            name=e.name,
            instructions=e.instructions,
            schema=e.schema_,
            include_previous=e.include_previous_extraction,
        )
        for e in extractors
    ]


def working_memory_spec(config: MemoryConfig, state: RecordState) -> WorkingMemorySpec | None:
    """What the Observer is told about the working-memory document, when it keeps one."""
    settings = config.working_memory
    if not (config.observation.manage_working_memory and settings.enabled):
        return None
    if settings.schema_ is not None:
        return WorkingMemorySpec(schema=settings.schema_, current=state.working_memory)
    return WorkingMemorySpec(template=settings.document_template, current=state.working_memory)


def _checked_working_memory(
    text: str | None, spec: WorkingMemorySpec | None
) -> tuple[str | None, str | None]:
    """(the document to store, why the update was refused): with a schema the update must be a JSON
    object within it, as Mastra checks it before saving; a refused update leaves the document as it was."""
    if text is None or spec is None or spec.schema is None:
        return text, None
    try:
        value = parse_json_reply(text)
    except ValueError as exc:
        return None, f"the working memory update is not JSON: {exc}"
    if value is None:
        return None, None
    problems = validate_extracted_value(value, spec.schema)
    if problems:
        return None, f"the working memory update lies outside its schema: {'; '.join(problems)}"
    return json.dumps(value, ensure_ascii=False), None


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
    document = working_memory_spec(config, state)
    if config.scope == "resource":
        parsed, transcript_text = _observe_threads(
            models, state, config, messages, previous, specs, tally, document
        )
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
            working_memory=document,
        )
    model = thresholds.resolve_model(config, "observer", sum(m.tokens for m in messages))
    extracted = dict(parsed.extracted)
    failures: dict[str, Any] = {}
    working_memory, refused = _checked_working_memory(parsed.working_memory, document)
    if refused is not None:
        failures[WORKING_MEMORY_TAG] = refused
    run_schema_extractors(
        models,
        config,
        model,
        specs,
        role="observer",
        observations=parsed.observations,
        transcript=transcript_text,
        previous=state.extracted,
        tally=tally,
        into=(extracted, failures),
    )
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
        working_memory=working_memory,
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
    working_memory: WorkingMemorySpec | None = None,
) -> ObserverOutput:
    """One Observer call. An answer that is degenerate or holds no observation is a failed attempt: asked
    once more, then the cycle fails, so the messages stay unobserved rather than leave the window with
    nothing written for them. A transcript with nothing in it (only data parts, say) is not sent at all."""
    if not transcript.text.strip():
        return ObserverOutput("")
    forwarded = forwarded_attachments(
        config.observation.observe_attachments,
        transcript.attachments,
        thresholds.resolve_model(config, "observer", input_tokens),
    )
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
        attachments=forwarded,
        working_memory=working_memory,
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
            tally.verdicts.append("degenerate")
            unusable.append("degenerate repetition")
            continue
        parsed = parse_observer_output(
            response.text,
            inline_extractors=[s.slug for s in specs if s.inline],
            thread_title_enabled=config.observation.thread_title and not multi_thread,
            multi_thread=multi_thread,
            working_memory=working_memory is not None,
            instructions=instructions_of(request),
        )
        tally.verdicts.append(answer_verdict(response.text, parsed))
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
    working_memory: WorkingMemorySpec | None = None,
) -> tuple[ObserverOutput, str]:
    counter = counter_for(config)
    shown = {
        (m.thread_id or ""): obscure_thread_id(m.thread_id or "")
        if config.obscure_thread_ids
        else m.thread_id or ""
        for m in messages
    }
    batches = thread_batches(messages, config.observation.max_tokens_per_batch)

    def observe(
        batch: list[tuple[str, list[WindowMessage]]], document: WorkingMemorySpec | None = working_memory
    ) -> tuple[ObserverOutput, str]:
        transcript = format_multi_thread_transcript(
            [(shown[thread], [message_from_json(m.message) for m in items]) for thread, items in batch],
            gap_markers=config.temporal_markers,
            count_tokens=counter.count_text,
        )
        tokens = sum(m.tokens for _, items in batch for m in items)
        output = _call_observer(
            models,
            state,
            config,
            transcript,
            tokens,
            previous,
            specs,
            tally,
            multi_thread=True,
            working_memory=document,
        )
        return output, transcript.text

    if working_memory is not None and len(batches) > 1:
        # every update is the whole document: batches run one after another, each from the last one's
        results = []
        document = working_memory
        for batch in batches:
            output, text = observe(batch, document)
            if output.working_memory is not None:
                document = replace(document, current=output.working_memory)
            results.append((output, text))
    else:
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
        working_memory=next(
            (o.working_memory for o, _ in reversed(results) if o.working_memory is not None), None
        ),
    )
    return combined, "\n\n".join(text for _, text in results)


def run_schema_extractors(
    models: ModelGateway,
    config: MemoryConfig,
    model: str,
    specs: Sequence[ExtractorSpec],
    *,
    role: thresholds.Role,
    observations: str,
    transcript: str | None,
    previous: Mapping[str, Any],
    tally: UsageTally,
    into: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """Each schema extractor's call, its value or its failure added to ``into`` (values, failures): one
    extractor failing never discards the observations, the reflection or the other extractors."""
    values, failures = into
    for spec in specs:
        if spec.inline:
            continue
        try:
            values[spec.slug] = run_schema_extractor(
                models,
                config,
                model,
                spec,
                role=role,
                observations=observations,
                transcript=transcript,
                previous=previous,
                tally=tally,
            )
        except (ModelError, ModelConfigurationError, ValueError) as exc:
            failures[spec.slug] = str(exc)


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
    """The call's settings, with the retry bound for transient errors (``modelRetry``, or the model list
    entry's ``maxRetries``) and, for a model list, the models to fall back on (``fallbacks``)."""
    settings = thresholds.resolve_model_settings(config, role).model_dump(exclude_none=True)
    # a model list does not depend on the input's size, so any size gives its route
    first, *rest = thresholds.resolve_model_route(config, role, 0)
    default_retries = config.model_retry.max_retries
    settings["max_retries"] = default_retries if first.max_retries is None else first.max_retries
    if rest:
        settings["fallbacks"] = [
            {"model": c.model, "maxRetries": default_retries if c.max_retries is None else c.max_retries}
            for c in rest
        ]
    return settings
