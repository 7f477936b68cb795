"""The process's state cache: a taken state is a fork, a lent one (``latest``) the held object that
nobody may change; bounded; never steps back in time."""

from __future__ import annotations

import pytest

from om_core.application.state_cache import StateCache
from om_core.domain.state import RecordState, evolve
from tests.unit.test_policy import message


def state(stream: str, messages: int) -> RecordState:
    return evolve(RecordState(stream_id=stream), [message(i, 10) for i in range(1, messages + 1)])


def test_a_taken_state_is_a_fork_its_taker_may_evolve() -> None:
    cache = StateCache(4)
    cache.keep("s", 7, state("s", 2))
    taken = cache.take("s", 7)
    assert taken is not None and len(taken.window) == 2
    evolve(taken, [message(3, 10)])
    again = cache.take("s", 7)
    assert again is not None and len(again.window) == 2


def test_the_latest_state_is_lent_not_copied() -> None:
    cache = StateCache(4)
    held = state("s", 2)
    cache.keep("s", 7, held)
    assert cache.latest("s") is held
    assert cache.latest("other") is None


def test_only_the_state_of_the_asked_position_is_given() -> None:
    cache = StateCache(4)
    cache.keep("s", 7, state("s", 2))
    assert cache.position("s") == 7
    assert cache.take("s", 8) is None and cache.take("other", 7) is None


def test_an_older_state_never_replaces_a_newer_one() -> None:
    cache = StateCache(4)
    cache.keep("s", 9, state("s", 3))
    cache.keep("s", 7, state("s", 2))
    assert cache.position("s") == 9
    cache.keep("s", 12, state("s", 4))
    assert cache.position("s") == 12


def test_the_least_recently_used_stream_leaves_first() -> None:
    cache = StateCache(2)
    cache.keep("a", 1, state("a", 1))
    cache.keep("b", 2, state("b", 1))
    assert cache.take("a", 1) is not None  # a is now the most recently used
    cache.keep("c", 3, state("c", 1))
    assert cache.position("b") is None and cache.position("a") == 1 and cache.position("c") == 3


def test_capacity_zero_holds_nothing_and_a_negative_one_is_refused() -> None:
    cache = StateCache(0)
    cache.keep("a", 1, state("a", 1))
    assert cache.position("a") is None
    with pytest.raises(ValueError, match="capacity"):
        StateCache(-1)


def test_a_forgotten_stream_is_no_longer_held() -> None:
    cache = StateCache(4)
    cache.keep("a", 1, state("a", 1))
    cache.forget("a")
    cache.forget("never-held")
    assert cache.position("a") is None and cache.take("a", 1) is None
