"""A record's configuration follows its profile, even one changed in place after it was parsed."""

from __future__ import annotations

from typing import Any

from om_core.application.configuration import record_config
from om_core.domain.state import initial_state


def test_a_profile_changed_in_place_is_parsed_again() -> None:
    profile: dict[str, Any] = {"observation": {"messageTokens": 2000}}
    state = initial_state("acme/thread/t")
    first = record_config(profile, state)
    assert record_config(profile, state) is first, "the same profile object is parsed once"
    profile["observation"]["messageTokens"] = 3000
    assert record_config(profile, state).observation.message_tokens == 3000
    assert first.observation.message_tokens == 2000
