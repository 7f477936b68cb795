"""The SQL engine behind a runtime's store, for tests and benchmarks that read (or damage) its tables
directly rather than through the store's ports."""

from __future__ import annotations

import sqlalchemy as sa

from om_core.adapters.store import SqlEventStore
from om_core.application.deps import Deps


def engine_of(deps: Deps) -> sa.Engine:
    """The engine of the SQL adapter that plays the store's roles in ``deps``.

    Read from ``deps.records``: a worker runtime wraps ``deps.store`` to meter appends, the other roles are
    the adapter itself.
    """
    adapter = deps.records
    if not isinstance(adapter, SqlEventStore):
        raise TypeError(f"these Deps run on {type(adapter).__name__}, not on the SQL store")
    return adapter.engine
