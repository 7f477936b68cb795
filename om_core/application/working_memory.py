"""Reading the working-memory document the Observer keeps (``observation.manageWorkingMemory``), as
Mastra's ``Memory.getWorkingMemory`` and ``getWorkingMemoryTemplate`` give it.

The document lives in the record: in thread scope the thread's own, in resource scope the resource's,
shared by its threads. It changes only through observation outcomes, so there is nothing to write here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from om_core.application.deps import Deps
from om_core.application.profiles import config_of
from om_core.application.threads import record_state


@dataclass(frozen=True)
class WorkingMemoryView:
    thread_id: str
    resource_id: str | None
    enabled: bool
    scope: str | None
    format: Literal["markdown", "json"]
    # the Markdown template the Observer follows, or the JSON Schema as text
    template: str | None
    document: str | None
    cycle_id: str | None
    updated_at: str | None
    version: int

    def to_json(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "resource_id": self.resource_id,
            "enabled": self.enabled,
            "scope": self.scope,
            "format": self.format,
            "template": self.template,
            "working_memory": self.document,
            "cycle_id": self.cycle_id,
            "updated_at": self.updated_at,
            "version": self.version,
        }


def read_working_memory(deps: Deps, *, tenant: str, thread_id: str) -> WorkingMemoryView:
    """The thread's working memory; ``document`` is None until the Observer first writes it (and always
    when working memory is off). RecordNotFoundError for a thread without a record."""
    state = record_state(deps, tenant=tenant, thread_id=thread_id)
    config = config_of(deps, state)
    settings = config.working_memory
    enabled = config.observation.manage_working_memory and settings.enabled
    schema = settings.schema_
    template = None
    if schema is not None:
        template = json.dumps(schema, ensure_ascii=False, sort_keys=True)
    elif enabled:
        template = settings.document_template
    return WorkingMemoryView(
        thread_id=thread_id,
        resource_id=state.resource_id,
        enabled=enabled,
        scope=settings.scope if enabled else None,
        format="json" if schema is not None else "markdown",
        template=template,
        # a document the Observer left empty is no document
        document=(state.working_memory or None) if enabled else None,
        cycle_id=state.working_memory_cycle_id if enabled else None,
        updated_at=state.working_memory_updated_at if enabled else None,
        version=state.version,
    )
