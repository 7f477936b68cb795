"""Recently used record states of this process, so that a request does not re-read and re-parse its record.

Every request starts from its record's state, and the state grows with the window: reading and parsing it
was most of an append's time. A process keeps the states it last read or wrote, each under the global
position of the last event it covers; the store answers "still that position" with one small row, and only
a record somebody else changed meanwhile is read in full. A position names one stream at one version for
ever, so an entry can be old but never wrong; an erased and re-created thread gets new positions.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from om_core.domain.state import RecordState

DEFAULT_CAPACITY = 256


class StateCache:
    """A bounded, thread-safe map from stream to (position, state), least recently used out first.

    ``take`` hands out a fork, which its caller owns and may evolve; ``latest`` lends the stored state
    itself, which nobody may change.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 0:
            raise ValueError(f"the state cache capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[int, RecordState]] = OrderedDict()
        self._lock = threading.Lock()

    def position(self, stream_id: str) -> int | None:
        """The position of the state held for ``stream_id``, if any."""
        with self._lock:
            entry = self._entries.get(stream_id)
        return None if entry is None else entry[0]

    def take(self, stream_id: str, position: int) -> RecordState | None:
        """A fork of the state held for ``stream_id`` if it is the one of ``position``."""
        with self._lock:
            entry = self._entries.get(stream_id)
            if entry is None or entry[0] != position:
                return None
            self._entries.move_to_end(stream_id)
        return entry[1].fork()

    def latest(self, stream_id: str) -> RecordState | None:
        """The newest state held for ``stream_id`` itself, unverified, lent: it must not be changed, so a
        writer plans on it borrowed (``Plan(borrowed=True)`` copies it at its first event), and a reader
        (placing a thread) only reads it. Only a caller whose compare-and-set on the version and position
        will tell it when somebody else wrote since may start from it; it then reads the record
        (``load_state``)."""
        with self._lock:
            entry = self._entries.get(stream_id)
            if entry is None:
                return None
            self._entries.move_to_end(stream_id)
        return entry[1]

    def keep(self, stream_id: str, position: int, state: RecordState) -> None:
        """Hold ``state`` (the stream as of ``position``); the caller must not change that object again."""
        if self.capacity == 0:
            return
        with self._lock:
            held = self._entries.get(stream_id)
            # a slower request must not replace a newer state with the older one it read
            if held is not None and held[0] > position:
                return
            self._entries[stream_id] = (position, state)
            self._entries.move_to_end(stream_id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def forget(self, stream_id: str) -> None:
        with self._lock:
            self._entries.pop(stream_id, None)
