"""``RecordState.in_flight``: the one answer to "is this cycle still running?" for the fold, the tasks and
the readers that wait."""

from __future__ import annotations

import pytest

from om_core.domain.events import ObservationBufferStale, SyncObservationFailed, SyncObservationStale
from om_core.domain.state import BufferInFlight, InvariantViolation, ReflectionInFlight, SyncInFlight, fold
from om_core.domain.timeutil import format_time
from tests.unit.test_policy import NOW
from tests.unit.test_state_fork import busy_state

AT = format_time(NOW)


def test_a_cycle_is_in_flight_in_its_own_slot_until_its_outcome() -> None:
    state = busy_state()  # buffer cycle c3 runs; c2's chunk waits for activation

    assert state.in_flight("c3") is state.buffer_in_flight is not None
    assert state.in_flight("c3", BufferInFlight) is state.buffer_in_flight
    assert state.in_flight("c3", SyncInFlight) is None
    assert state.in_flight("c3", ReflectionInFlight) is None
    assert state.in_flight("c2") is None
    assert state.in_flight("no-such-cycle") is None

    done = fold(state, [ObservationBufferStale(cycle_id="c3", reason="observed meanwhile", at=AT)])
    assert done.in_flight("c3") is None


def test_a_stale_result_of_another_kind_leaves_the_cycle_in_flight() -> None:
    state = fold(busy_state(), [SyncObservationStale(cycle_id="c3", reason="not ours", at=AT)])

    assert state.in_flight("c3", BufferInFlight) is not None
    assert state.stats.stale_results == 1


def test_an_outcome_for_a_cycle_not_in_its_kinds_slot_does_not_fold() -> None:
    with pytest.raises(InvariantViolation, match="sync observation c3 is not in flight"):
        fold(busy_state(), [SyncObservationFailed(cycle_id="c3", error="boom", failed_at=AT)])
