"""Upcasters chain schema versions on read and never touch the stored data."""

from __future__ import annotations

from typing import Any

import pytest

from om_core.domain.upcasting import UpcasterError, Upcasters


def test_steps_chain_up_to_the_latest_version() -> None:
    upcasters = Upcasters()

    @upcasters.step("ThreadTitled", 1)
    def rename(data: dict[str, Any]) -> dict[str, Any]:
        data["title"] = data.pop("name")
        return data

    upcasters.register("ThreadTitled", 2, lambda data: {**data, "source": "unknown"})
    stored = {"name": "Trip", "nested": {"kept": [1, 2]}}

    assert upcasters.upcast("ThreadTitled", 1, stored) == (
        3,
        {"title": "Trip", "nested": {"kept": [1, 2]}, "source": "unknown"},
    )
    assert stored == {"name": "Trip", "nested": {"kept": [1, 2]}}
    assert upcasters.upcast("ThreadTitled", 2, {"title": "x"}) == (3, {"title": "x", "source": "unknown"})


def test_events_without_steps_pass_through_unchanged() -> None:
    upcasters = Upcasters()
    upcasters.register("ThreadTitled", 1, lambda data: data)
    data = {"a": 1}
    assert upcasters.upcast("Other", 1, data) == (1, data)
    assert upcasters.upcast("ThreadTitled", 5, data) == (5, data)


def test_a_step_registered_twice_or_below_version_one_is_refused() -> None:
    upcasters = Upcasters()
    upcasters.register("E", 1, lambda data: data)
    with pytest.raises(UpcasterError):
        upcasters.register("E", 1, lambda data: data)
    with pytest.raises(UpcasterError):
        upcasters.register("E", 0, lambda data: data)
