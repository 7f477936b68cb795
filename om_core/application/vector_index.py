"""Use cases of the vector index (retrieval ``vector: true``): index what a cycle observed; search it.

The index is a projection of the observation outcomes, built after their commit by a task of its own (as
Mastra indexes "fire-and-forget with retries"): a failed embedding call never holds back an observation,
and indexing the same cycle again replaces its groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from om_core.application.deps import Deps
from om_core.application.ports import EmbeddingRequest
from om_core.application.profiles import config_of, is_record_stream
from om_core.application.repository import load_state
from om_core.application.streams import record_stream_for, thread_stream_id
from om_core.application.task_requests import QUEUE_MAINTENANCE, TASK_INDEX_OBSERVATIONS, task_request
from om_core.domain.config import MemoryConfig
from om_core.domain.envelope import IndexedGroup, TaskRequest
from om_core.domain.events import ObservationBufferCompleted, SyncObservationCompleted, effect_event_id
from om_core.domain.observation_log import observation_groups
from om_core.domain.vectors import nearest

_INDEXED_OUTCOMES = (ObservationBufferCompleted.event_type, SyncObservationCompleted.event_type)


def vector_index_enabled(config: MemoryConfig) -> bool:
    return config.retrieval is not None and config.retrieval.vector


def index_task(stream_id: str, cycle_id: str) -> TaskRequest:
    return task_request(stream_id, cycle_id, TASK_INDEX_OBSERVATIONS, QUEUE_MAINTENANCE)


def index_observations(deps: Deps, stream_id: str, cycle_id: str) -> int:
    """Embed and store the observation groups the cycle's recorded outcome wrote; returns how many.

    Raises ModelError when the embedder fails (after the gateway's own retries).
    """
    outcome = deps.store.find_event(effect_event_id(stream_id, cycle_id, "outcome"))
    if outcome is None or outcome.event_type not in _INDEXED_OUTCOMES:
        return 0
    groups = observation_groups(str(outcome.data.get("observations", "")))
    state = load_state(deps.records, deps.store, stream_id, deps.states)
    config = config_of(deps, state)
    if not groups or config.retrieval is None or not config.retrieval.vector:
        return 0
    threads: dict[str, str | None]
    if state.thread_id is not None:
        threads = {g.range_start: state.thread_id for g in groups}
    else:
        # a resource record: each group belongs to the thread of the messages it was written from
        refs = deps.messages.find_messages(stream_id, [g.range_start for g in groups])
        threads = {g.range_start: refs[g.range_start].thread_id for g in groups if g.range_start in refs}
    embedder = config.retrieval.embedder
    embedded = deps.models.embed(EmbeddingRequest(model=embedder, texts=[g.text for g in groups]))
    return deps.index.upsert_indexed_groups(
        [
            IndexedGroup(
                stream_id=stream_id,
                group_id=group.group_id,
                tenant=stream_id.split("/", 1)[0],
                thread_id=threads.get(group.range_start),
                resource_id=state.resource_id,
                range_start=group.range_start,
                range_end=group.range_end,
                text=group.text,
                observed_at=str(outcome.data.get("last_observed_at", "")),
                model=embedder,
                embedding=vector,
            )
            for group, vector in zip(groups, embedded.vectors, strict=True)
        ],
        # written only while the outcome is stored: an erasure meanwhile leaves nothing behind
        source_event_id=outcome.event_id,
    )


@dataclass
class ReindexReport:
    streams: int = 0
    observations: int = 0
    groups: int = 0


def reindex_observations(deps: Deps, *, prefix: str = "", page: int = 500) -> ReindexReport:
    """Index every recorded observation again: after turning ``vector`` on for existing records, or after
    changing ``retrieval.embedder`` (search only ranks groups embedded by the configured embedder)."""
    report = ReindexReport()
    for stream_id in deps.store.iter_streams(prefix):
        if not is_record_stream(stream_id):
            continue
        report.streams += 1
        after = 0
        while True:
            events = deps.store.read_stream(stream_id, after_version=after, limit=page)
            for recorded in events:
                if recorded.event_type in _INDEXED_OUTCOMES:
                    report.observations += 1
                    report.groups += index_observations(deps, stream_id, str(recorded.data["cycle_id"]))
            if len(events) < page:
                break
            after = events[-1].stream_version
    return report


@dataclass(frozen=True, slots=True)
class GroupHit:
    group: IndexedGroup
    score: float


def search_observations(
    deps: Deps, *, tenant: str, thread_id: str, query: str, top_k: int, config: MemoryConfig
) -> list[GroupHit]:
    """The indexed groups most similar to ``query``: the thread's, or its resource's (``retrieval.scope``)."""
    assert config.retrieval is not None
    own = load_state(deps.records, deps.store, thread_stream_id(tenant, thread_id), deps.states)
    record = record_stream_for(deps, tenant, thread_id, own.resource_id)
    whole_resource = config.retrieval.scope == "resource" and own.resource_id is not None
    streams = [record]
    if whole_resource and record == thread_stream_id(tenant, thread_id):
        # thread scope: the resource's other threads running under the same profile (another agent's
        # threads of the same user are not this one's memory)
        rows = deps.records.list_threads(
            tenant, resource_id=own.resource_id, limit=10_000, profile=own.profile
        )
        streams += [thread_stream_id(tenant, r.thread_id) for r in rows if r.thread_id != thread_id]
    found = deps.index.load_indexed_groups(tenant, stream_ids=streams)
    candidates = [
        g
        for g in found
        if g.model == config.retrieval.embedder and (whole_resource or g.thread_id == thread_id)
    ]
    if not candidates:
        return []
    query_vector = deps.models.embed(
        EmbeddingRequest(model=config.retrieval.embedder, texts=[query])
    ).vectors[0]
    ranked = nearest(query_vector, [(g, g.embedding) for g in candidates], top_k)
    return [GroupHit(group, score) for group, score in ranked if score > 0]
