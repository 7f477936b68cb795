"""The models a thread's roles may call, as `GET /v1/threads/{id}` reports them (docs/api.md, Endpoints)."""

from __future__ import annotations

from om_core.application.threads import role_models
from om_core.domain.config import parse_memory_config
from om_core.domain.thresholds import DEFAULT_MODEL


def test_no_model_is_the_default_for_both_roles() -> None:
    assert role_models(parse_memory_config({})) == {"observer": [DEFAULT_MODEL], "reflector": [DEFAULT_MODEL]}


def test_a_role_without_a_model_falls_back_to_the_other_roles() -> None:
    config = parse_memory_config({"observation": {"model": "openai/gpt-5-mini"}})
    assert role_models(config) == {"observer": ["openai/gpt-5-mini"], "reflector": ["openai/gpt-5-mini"]}


def test_default_is_resolved() -> None:
    config = parse_memory_config(
        {"observation": {"model": "default"}, "reflection": {"model": "openai/gpt-5"}}
    )
    assert role_models(config) == {"observer": [DEFAULT_MODEL], "reflector": ["openai/gpt-5"]}


def test_tiers_by_input_size_are_listed_smallest_inputs_first() -> None:
    tiers = {"upTo": {"100000": "openai/gpt-5", "8000": "openai/gpt-5-mini"}}
    config = parse_memory_config(
        {"observation": {"model": tiers}, "reflection": {"model": "openai/gpt-5-nano"}}
    )
    assert role_models(config) == {
        "observer": ["openai/gpt-5-mini", "openai/gpt-5"],
        "reflector": ["openai/gpt-5-nano"],
    }
