"""Read-only queries the API answers straight from the store's projection tables (threads of a resource,
message lookup and full-text search for recall). They only read what the inline projections already hold,
so they sit with the entry point rather than in the event-store port."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from om_core.adapters.store.schema import SEARCH_TEXT_CONFIG, messages, records
from om_core.adapters.store.sql_store import MESSAGE_COLUMNS, stored_message
from om_core.application.ports import EventStore
from om_core.application.streams import thread_stream_id
from om_core.domain.envelope import StoredMessage


def engine_of(store: EventStore) -> Engine:
    """The SQL engine behind a store, through any wrapper (such as the workers' metered store)."""
    while not isinstance(getattr(store, "engine", None), Engine):
        inner = getattr(store, "inner", None)
        if not isinstance(inner, EventStore):
            raise RuntimeError("this store exposes no SQL engine")
        store = inner
    engine: Engine = store.engine  # type: ignore[attr-defined]
    return engine


@dataclass(frozen=True)
class ThreadRow:
    thread_id: str
    resource_id: str | None
    title: str | None
    metadata: dict[str, Any]
    config: dict[str, Any]
    version: int
    updated_at: datetime | None

    def as_json(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "resource_id": self.resource_id,
            "title": self.title,
            "metadata": self.metadata,
            "config": self.config,
            "version": self.version,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


def list_threads(
    store: EventStore,
    tenant: str,
    *,
    resource_id: str | None = None,
    before: datetime | None = None,
    after: datetime | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[ThreadRow]:
    """Thread records of a tenant (optionally of one resource), most recently updated first."""
    query = sa.select(
        records.c.stream_id, records.c.resource_id, records.c.version, records.c.state, records.c.updated_at
    ).where(
        records.c.tenant == tenant,
        records.c.stream_id.startswith(thread_stream_id(tenant, ""), autoescape=True),
    )
    if resource_id is not None:
        query = query.where(records.c.resource_id == resource_id)
    if before is not None:
        query = query.where(records.c.updated_at < before)
    if after is not None:
        query = query.where(records.c.updated_at > after)
    query = query.order_by(records.c.updated_at.desc(), records.c.stream_id).limit(limit).offset(offset)
    with engine_of(store).connect() as conn:
        rows = conn.execute(query).all()
    out = []
    for row in rows:
        state = row.state or {}
        out.append(
            ThreadRow(
                thread_id=str(state.get("thread_id") or row.stream_id.split("/", 2)[-1]),
                resource_id=row.resource_id,
                title=state.get("title"),
                metadata=dict(state.get("thread_metadata") or {}),
                config=dict(state.get("config_overrides") or {}),
                version=int(row.version),
                updated_at=row.updated_at,
            )
        )
    return out


def thread_updated_at(store: EventStore, stream_id: str) -> datetime | None:
    with engine_of(store).connect() as conn:
        value = conn.scalar(sa.select(records.c.updated_at).where(records.c.stream_id == stream_id))
    return value if isinstance(value, datetime) else None


def find_message(store: EventStore, tenant: str, message_id: str) -> StoredMessage | None:
    """A message of any of the tenant's threads, by id (recall cursors name messages, not threads)."""
    query = (
        sa.select(*MESSAGE_COLUMNS)
        .where(messages.c.tenant == tenant, messages.c.message_id == message_id)
        .limit(1)
    )
    with engine_of(store).connect() as conn:
        row = conn.execute(query).first()
    return None if row is None else stored_message(row)


@dataclass(frozen=True)
class SearchHit:
    message: StoredMessage
    score: float


def search_messages(
    store: EventStore, tenant: str, text: str, *, stream_ids: list[str] | None, limit: int
) -> list[SearchHit]:
    """Full-text search of message text: Postgres ``tsvector`` (ranked); SQLite, words as substrings."""
    engine = engine_of(store)
    scope = [messages.c.tenant == tenant]
    if stream_ids is not None:
        scope.append(messages.c.stream_id.in_(stream_ids))
    if engine.dialect.name == "postgresql":
        tsquery = sa.func.websearch_to_tsquery(sa.literal_column(f"'{SEARCH_TEXT_CONFIG}'::regconfig"), text)
        rank = sa.func.ts_rank(messages.c.search_tsv, tsquery)
        query = (
            sa.select(*MESSAGE_COLUMNS, rank.label("score"))
            .where(*scope, messages.c.search_tsv.op("@@")(tsquery))
            .order_by(rank.desc(), messages.c.created_at.desc())
            .limit(limit)
        )
    else:
        words = [w for w in text.lower().split() if w][:16]
        if not words:
            return []
        hits = [sa.case((sa.func.instr(sa.func.lower(messages.c.search), w) > 0, 1), else_=0) for w in words]
        score = sum(hits[1:], hits[0])
        query = (
            sa.select(*MESSAGE_COLUMNS, score.label("score"))
            .where(*scope, sa.or_(*[sa.func.instr(sa.func.lower(messages.c.search), w) > 0 for w in words]))
            .order_by(score.desc(), messages.c.created_at.desc())
            .limit(limit)
        )
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    return [SearchHit(message=stored_message(row), score=float(row.score)) for row in rows]
