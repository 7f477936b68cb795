"""A small memo keyed by an object's identity, for objects that are costly to hash or compare.

An entry keeps its key object alive, so the id it is filed under cannot name another object meanwhile, and
a proof recorded with it (a copy of the object, the size it was computed at, …) that must still equal the
caller's for the entry to answer. The memo is bounded: when full it starts again, which suits keys that
live long (profiles, configs) and are few.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

V = TypeVar("V")


class IdentityMemo(Generic[V]):
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: dict[int, tuple[Any, Any, V]] = {}

    def get(self, key: object, proof: object) -> V | None:
        """The value filed for ``key`` itself, if it was filed with a proof equal to ``proof``."""
        entry = self._entries.get(id(key))
        if entry is not None and entry[0] is key and entry[1] == proof:
            return entry[2]
        return None

    def put(self, key: object, proof: object, value: V) -> None:
        if len(self._entries) >= self._capacity:
            self._entries.clear()
        self._entries[id(key)] = (key, proof, value)
