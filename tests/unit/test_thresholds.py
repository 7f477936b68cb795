"""Threshold arithmetic, checked against worked scenarios (docs/semantics.md, Thresholds)."""

from __future__ import annotations

from typing import Any

import pytest

from om_core.domain.config import ConfigError, parse_memory_config
from om_core.domain.thresholds import (
    DEFAULT_MODEL,
    ObservationThresholds,
    auto_idle_ttl_ms,
    buffer_interval,
    buffered_reflection_line_count,
    compression_attempt_levels,
    compression_start_level,
    message_threshold,
    min_early_reflection_activation_tokens,
    parse_activate_after_idle,
    ratio_base_tokens,
    reflection_compression_target,
    reflection_slice_tokens,
    resolve_activate_on_provider_change,
    resolve_activation_ratio,
    resolve_block_after,
    resolve_buffer_tokens,
    resolve_idle_ttl_ms,
    resolve_model,
    resolve_model_settings,
    resolve_observation_thresholds,
    resolve_reflection_thresholds,
    resolve_retention_floor,
    select_chunks_to_activate,
    should_request_buffer,
    uses_default_model_selection,
    validate_compression,
)

MINUTE = 60_000
HOUR = 60 * MINUTE


# ------------------------------------------------------------------- scenario 1: bufferTokens


@pytest.mark.parametrize(
    ("buffer_tokens", "threshold", "expected"),
    [
        (0.25, 20_000, 5_000),
        (0.1, 70_000, 7_000),
        (0.01, 100_000, 1_000),
        (1, 30_000, 1),
        (5_000, 30_000, 5_000),
    ],
)
def test_scenario_1_buffer_tokens(buffer_tokens: float, threshold: int, expected: int) -> None:
    assert resolve_buffer_tokens(buffer_tokens, threshold) == expected


def test_buffer_tokens_false_means_no_buffering() -> None:
    assert resolve_buffer_tokens(False, 30_000) is None


# --------------------------------------------------------------------- scenario 2: blockAfter


@pytest.mark.parametrize(
    ("block_after", "threshold", "expected"),
    [
        (1.5, 20_000, 30_000),
        (1.0, 20_000, 20_000),
        (1.2, 70_000, 84_000),
        (1.3, 33_333, 43_333),
        (50_000, 30_000, 50_000),
        (100, 30, 100),
    ],
)
def test_scenario_2_block_after(block_after: float, threshold: int, expected: int) -> None:
    assert resolve_block_after(block_after, threshold) == expected


def test_unset_block_after_resolves_to_none() -> None:
    assert resolve_block_after(None, 30_000) is None


# ------------------------------------------------------------ scenario 3: retention floor / ratio


@pytest.mark.parametrize(
    ("buffer_activation", "expected"), [(0.7, 9_000), (0.8, 6_000), (1.0, 0), (0.0, 30_000), (5_000, 5_000)]
)
def test_scenario_3_retention_floor(buffer_activation: float, expected: int) -> None:
    assert resolve_retention_floor(buffer_activation, 30_000) == expected


def test_scenario_3_activation_ratio_of_absolute_values() -> None:
    assert resolve_activation_ratio(5_000, 30_000) == pytest.approx(0.8333, abs=1e-4)
    assert resolve_activation_ratio(50_000, 30_000) == 0
    assert resolve_activation_ratio(0.7, 30_000) == 0.7


# ------------------------------------------------------------------- scenario 4: shared budget


SHARED = {"shareTokenBudget": True, "observation": {"bufferTokens": False}}


@pytest.mark.parametrize(
    ("observation_tokens", "expected"),
    [(0, 70_000), (10_000, 60_000), (33_333, 36_667), (50_000, 30_000), (100_000, 30_000)],
)
def test_scenario_4_shared_budget_message_threshold(observation_tokens: int, expected: int) -> None:
    assert message_threshold(parse_memory_config(SHARED), observation_tokens) == expected


def test_without_shared_budget_the_threshold_is_message_tokens() -> None:
    config = parse_memory_config({"observation": {"messageTokens": 20_000}})
    assert message_threshold(config, 0) == message_threshold(config, 35_000) == 20_000
    assert ratio_base_tokens(config) == 20_000


def test_ratios_resolve_against_the_shared_range_max() -> None:
    assert ratio_base_tokens(parse_memory_config(SHARED)) == 70_000


# -------------------------------------------------------- scenarios 5–8: activation chunk choice


@pytest.mark.parametrize(
    ("chunks", "expected_count", "removed"),
    [
        ([5_000, 5_000, 5_000], 3, 15_000),
        ([8_000, 9_000], 2, 17_000),
        ([3_000, 25_000], 1, 3_000),
        ([10_000], 1, 10_000),
    ],
)
def test_scenario_5_chunk_choice(chunks: list[int], expected_count: int, removed: int) -> None:
    floor = resolve_retention_floor(0.7, 30_000)
    count = select_chunks_to_activate(chunks, 25_000, 30_000, floor, None)
    assert count == expected_count
    assert sum(chunks[:count]) == removed


def test_scenario_6_ratio_one_removes_everything() -> None:
    floor = resolve_retention_floor(1.0, 30_000)
    assert select_chunks_to_activate([5_000, 5_000], 10_000, 30_000, floor, None) == 2


def test_scenario_6_absolute_keep() -> None:
    floor = resolve_retention_floor(5_000, 30_000)
    count = select_chunks_to_activate([4_000, 4_000, 4_000], 15_000, 30_000, floor, None)
    assert count == 3  # removes 12,000, leaves 3,000 >= 1,000


def test_scenario_7_defaults_leave_at_least_a_thousand_tokens() -> None:
    floor = resolve_retention_floor(0.8, 30_000)
    assert floor == 6_000
    count = select_chunks_to_activate([6_000] * 5, 30_500, 30_000, floor, 36_000)
    assert count == 4
    assert 30_500 - 6_000 * count == 6_500


def test_scenario_8_block_after_forces_the_larger_activation() -> None:
    floor = resolve_retention_floor(25_000, 100_000)
    block_after = resolve_block_after(1.2, 100_000)
    assert (floor, block_after) == (25_000, 120_000)
    assert select_chunks_to_activate([60_000, 64_000], 125_000, 100_000, floor, block_after) == 2
    assert select_chunks_to_activate([60_000, 64_000], 125_000, 100_000, floor, 130_000) == 1


def test_no_chunks_activate_nothing_and_a_floor_outside_the_threshold_is_refused() -> None:
    assert select_chunks_to_activate([], 40_000, 30_000, 6_000, 36_000) == 0
    with pytest.raises(ValueError, match="retention floor"):
        select_chunks_to_activate([1_000], 40_000, 30_000, 31_000, None)


def test_all_chunks_below_target_are_all_activated() -> None:
    assert select_chunks_to_activate([1_000, 1_000], 40_000, 30_000, 6_000, None) == 2


# ----------------------------------------------------------- scenarios 9–10: buffer triggering


def test_scenario_9_default_observation_thresholds() -> None:
    thresholds = resolve_observation_thresholds(parse_memory_config(None), 0)
    assert thresholds == ObservationThresholds(
        message_tokens=30_000,
        buffer_tokens=6_000,
        block_after=36_000,
        activation_ratio=0.8,
        retention_floor=6_000,
    )


def test_scenario_9_interval_halves_past_the_ramp_point() -> None:
    assert buffer_interval(6_000, 30_000, 23_399) == 6_000
    assert buffer_interval(6_000, 30_000, 23_400) == 3_000


def test_scenario_9_trigger_on_each_new_multiple() -> None:
    thresholds = resolve_observation_thresholds(parse_memory_config(None), 0)
    assert not should_request_buffer(5_999, 0, 5_999, thresholds)
    assert should_request_buffer(6_000, 0, 6_000, thresholds)
    assert not should_request_buffer(11_000, 6_000, 5_000, thresholds)
    assert should_request_buffer(12_100, 6_000, 6_100, thresholds)
    # Past the ramp point every 3,000 tokens count.
    assert should_request_buffer(24_000, 23_500, 3_000, thresholds)


def test_buffering_continues_between_threshold_and_block_after() -> None:
    # docs/semantics.md, Buffering (unlike Mastra 1.31.0, which stops at the threshold).
    thresholds = resolve_observation_thresholds(parse_memory_config(None), 0)
    assert should_request_buffer(31_000, 29_000, 3_000, thresholds)
    assert should_request_buffer(35_999, 32_000, 3_999, thresholds)
    assert not should_request_buffer(36_000, 33_000, 3_000, thresholds)
    assert not should_request_buffer(40_000, 33_000, 7_000, thresholds)


def test_scenario_10_needs_half_an_interval_of_new_tokens() -> None:
    config = parse_memory_config({"observation": {"bufferTokens": 5_000}})
    thresholds = resolve_observation_thresholds(config, 0)
    assert not should_request_buffer(10_000, 5_000, 2_499, thresholds)
    assert should_request_buffer(10_000, 5_000, 2_500, thresholds)


def test_no_buffer_requests_without_buffering() -> None:
    thresholds = resolve_observation_thresholds(
        parse_memory_config({"observation": {"bufferTokens": False}}), 0
    )
    assert thresholds.buffer_tokens is None and thresholds.block_after is None
    assert not should_request_buffer(12_000, 0, 12_000, thresholds)


# ---------------------------------------------------------------- scenario 15–16: idle TTLs


@pytest.mark.parametrize(
    ("model", "options", "expected"),
    [
        ("acme/some-model", None, 5 * MINUTE),
        ("openai/gpt-5-mini", {"openai": {"promptCacheRetention": "24h"}}, HOUR),
        ("openai/gpt-5.5", {"openai": {"promptCacheRetention": "in_memory"}}, 5 * MINUTE),
        ("openai/gpt-4.1", None, 5 * MINUTE),
        ("openai/gpt-5", None, 5 * MINUTE),
        ("openai/gpt-5-mini", None, 5 * MINUTE),
        ("openai/gpt-5.1-codex", None, 5 * MINUTE),
        ("openai/gpt-5.4-pro", None, 5 * MINUTE),
        ("openai/gpt-5.5", None, HOUR),
        ("openai/gpt-6", None, HOUR),
        ("openai.responses/gpt-6", None, HOUR),
        ("anthropic/claude-sonnet-4-5", None, 5 * MINUTE),
        ("google/gemini-2.5-flash", None, 24 * HOUR),
        ("gemini/gemini-2.5-pro", None, 24 * HOUR),
        ("deepseek/deepseek-chat", None, HOUR),
        ("groq/llama-3.3-70b", None, 2 * HOUR),
        ("xai/grok-4", None, 5 * MINUTE),
        ("openrouter/google/gemini-2.5-flash", None, 5 * MINUTE),
        ("gpt-5.5", None, 5 * MINUTE),
    ],
)
def test_scenario_15_auto_ttl(model: str, options: dict[str, Any] | None, expected: int) -> None:
    assert auto_idle_ttl_ms(model, options) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5m", 300_000),
        ("1hr", 3_600_000),
        ("90 sec", 90_000),
        ("1.5h", 5_400_000),
        (False, None),
        (None, None),
        (300_000, 300_000),
        ("auto", "auto"),
    ],
)
def test_scenario_16_ttl_parsing(value: object, expected: object) -> None:
    assert parse_activate_after_idle(value) == expected


@pytest.mark.parametrize("value", ["5 weeks", -1])
def test_scenario_16_ttl_parsing_errors(value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_activate_after_idle(value, "reflection.activateAfterIdle")
    assert caught.value.option == "reflection.activateAfterIdle" and caught.value.value == value


def test_idle_ttl_resolution_per_scope() -> None:
    config = parse_memory_config({"activateAfterIdle": "5m"})
    assert resolve_idle_ttl_ms(config, "openai/gpt-5") == 300_000
    assert resolve_idle_ttl_ms(config, "openai/gpt-5", "reflection") is None

    disabled = parse_memory_config(
        {"activateAfterIdle": 300_000, "observation": {"activateAfterIdle": False}}
    )
    assert resolve_idle_ttl_ms(disabled, None) is None

    auto = parse_memory_config({"activateAfterIdle": "auto", "reflection": {"activateAfterIdle": "auto"}})
    assert resolve_idle_ttl_ms(auto, "google/gemini-2.5-pro") == 24 * HOUR
    assert resolve_idle_ttl_ms(auto, "deepseek/deepseek-chat", "reflection") == HOUR
    assert resolve_idle_ttl_ms(auto, None) == 5 * MINUTE
    options = {"openai": {"promptCacheRetention": "24h"}}
    assert resolve_idle_ttl_ms(auto, "openai/gpt-5-mini", caller_provider_options=options) == HOUR

    overridden = parse_memory_config({"observation": {"activateAfterIdle": "2m"}})
    assert resolve_idle_ttl_ms(overridden, None) == 120_000


def test_provider_change_resolution_per_scope() -> None:
    config = parse_memory_config({"activateOnProviderChange": True})
    assert resolve_activate_on_provider_change(config) is True
    assert resolve_activate_on_provider_change(config, "reflection") is False
    config = parse_memory_config(
        {"activateOnProviderChange": True, "observation": {"activateOnProviderChange": False}}
    )
    assert resolve_activate_on_provider_change(config) is False
    config = parse_memory_config({"reflection": {"activateOnProviderChange": True}})
    assert resolve_activate_on_provider_change(config, "reflection") is True


# ------------------------------------------------------------------------- reflection (27, 28)


def test_scenario_27_reflection_points() -> None:
    thresholds = resolve_reflection_thresholds(parse_memory_config(None))
    assert thresholds.observation_tokens == 40_000
    assert thresholds.buffer_start_tokens == 20_000
    assert thresholds.block_after == 48_000
    assert thresholds.sync_tokens == 48_000


def test_reflection_without_buffering_is_synchronous_at_the_threshold() -> None:
    thresholds = resolve_reflection_thresholds(parse_memory_config({"observation": {"bufferTokens": False}}))
    assert thresholds.buffer_start_tokens is None and thresholds.block_after is None
    assert thresholds.sync_tokens == 40_000


def test_scenario_27_buffered_reflection_slice() -> None:
    lines = buffered_reflection_line_count(24_000, 400, 40_000, 0.5)
    assert lines == 333
    slice_tokens = reflection_slice_tokens(24_000, 400, lines)
    assert slice_tokens == 19_980
    assert reflection_compression_target(slice_tokens) == 14_985
    assert min_early_reflection_activation_tokens(40_000, 0.5) == 15_000


def test_buffered_reflection_slice_never_exceeds_the_log() -> None:
    assert buffered_reflection_line_count(10_000, 50, 40_000, 0.5) == 50
    assert buffered_reflection_line_count(0, 0, 40_000, 0.5) == 0
    assert reflection_slice_tokens(0, 0, 0) == 0


@pytest.mark.parametrize(
    ("tokens", "target", "ok"),
    [(5_000, 10_000, True), (10_000, 10_000, False), (9_500, 10_000, True), (10_500, 10_000, False)],
)
def test_scenario_28_validate_compression(tokens: int, target: int, ok: bool) -> None:
    assert validate_compression(tokens, target) is ok


# ------------------------------------------------------------------------ scenario 24: ladder


@pytest.mark.parametrize(
    ("model", "level", "attempts"),
    [
        ("google/gemini-2.5-flash", 2, 3),
        ("google/gemini-2.5-flash-lite", 2, 3),
        ("google/gemini-3.1-flash-lite-preview", 1, 4),
        ("openai/gpt-5-mini", 1, 4),
    ],
)
def test_scenario_24_compression_start_level(model: str, level: int, attempts: int) -> None:
    assert compression_start_level(model) == level
    levels = compression_attempt_levels(level)
    assert len(levels) == attempts and levels[-1] == 4


def test_compression_from_level_zero_makes_four_attempts() -> None:
    assert compression_attempt_levels(0) == (0, 1, 2, 3)


# ----------------------------------------------------------------------------------- models


def test_default_model() -> None:
    config = parse_memory_config(None)
    assert resolve_model(config, "observer", 1_000) == DEFAULT_MODEL == "google/gemini-2.5-flash"
    assert resolve_model(parse_memory_config({"model": "default"}), "reflector", 1) == DEFAULT_MODEL


def test_model_fallback_chain_and_its_mirror() -> None:
    top = parse_memory_config({"model": "a/top"})
    assert resolve_model(top, "observer", 1) == resolve_model(top, "reflector", 1) == "a/top"
    only_reflection = parse_memory_config({"reflection": {"model": "a/refl"}})
    assert resolve_model(only_reflection, "observer", 1) == "a/refl"
    only_observation = parse_memory_config({"observation": {"model": "a/obs"}})
    assert resolve_model(only_observation, "reflector", 1) == "a/obs"
    both = parse_memory_config({"observation": {"model": "a/obs"}, "reflection": {"model": "a/refl"}})
    assert (resolve_model(both, "observer", 1), resolve_model(both, "reflector", 1)) == ("a/obs", "a/refl")


def test_model_by_input_tokens_picks_the_smallest_fitting_tier() -> None:
    config = parse_memory_config({"model": {"upTo": {"100000": "google/gemini-2.5-pro", "8000": "default"}}})
    assert resolve_model(config, "observer", 500) == DEFAULT_MODEL
    assert resolve_model(config, "observer", 8_000) == DEFAULT_MODEL
    assert resolve_model(config, "reflector", 8_001) == "google/gemini-2.5-pro"


def test_an_input_over_every_tier_goes_to_the_largest_tier() -> None:
    config = parse_memory_config({"model": {"upTo": {"100000": "google/gemini-2.5-pro", "8000": "default"}}})
    assert resolve_model(config, "reflector", 100_001) == "google/gemini-2.5-pro"
    assert resolve_model(config, "observer", 10**9) == "google/gemini-2.5-pro"
    only_default = parse_memory_config({"observation": {"model": {"upTo": {"10": "default"}}}})
    assert resolve_model(only_default, "observer", 11) == DEFAULT_MODEL


def test_default_model_settings_per_role() -> None:
    config = parse_memory_config(None)
    observer, reflector = (
        resolve_model_settings(config, "observer"),
        resolve_model_settings(config, "reflector"),
    )
    assert (observer.temperature, observer.max_output_tokens) == (0.3, 100_000)
    assert (reflector.temperature, reflector.max_output_tokens) == (0.0, 100_000)


def test_max_output_tokens_default_only_with_default_model_selection() -> None:
    custom = parse_memory_config({"model": "openai/gpt-5-mini"})
    assert not uses_default_model_selection(custom, "observer")
    assert resolve_model_settings(custom, "observer").max_output_tokens is None
    tiers = parse_memory_config({"observation": {"model": {"upTo": {"1000": "openai/gpt-5-mini"}}}})
    assert uses_default_model_selection(tiers, "observer")
    assert resolve_model_settings(tiers, "observer").max_output_tokens == 100_000


def test_explicit_model_settings_win() -> None:
    config = parse_memory_config(
        {"reflection": {"modelSettings": {"temperature": 0.7, "maxOutputTokens": 4_000, "seed": 3}}}
    )
    settings = resolve_model_settings(config, "reflector")
    assert (settings.temperature, settings.max_output_tokens, settings.seed) == (0.7, 4_000, 3)
