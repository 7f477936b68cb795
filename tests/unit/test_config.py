"""Memory configuration: defaults, every validation rule of docs/configuration.md, key spelling, layering."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from om_core.domain.config import (
    ConfigError,
    Extractor,
    MemoryConfig,
    ModelByInputTokens,
    RetrievalConfig,
    merge_config_layers,
    parse_memory_config,
    require_thread_id,
)


def problem_for(raw: dict[str, Any], option: str) -> tuple[object, str]:
    """Parse ``raw`` expecting a problem on ``option``; return that problem's value and rule."""
    with pytest.raises(ConfigError) as caught:
        parse_memory_config(raw)
    for problem in caught.value.problems:
        if problem.option == option:
            return problem.value, problem.rule
    raise AssertionError(f"no problem on {option!r}: {caught.value}")


# ------------------------------------------------------------------------------------------ defaults


def test_defaults_follow_the_semantics_table() -> None:
    config = parse_memory_config(None)
    observation, reflection = config.observation, config.reflection
    assert config.model is None
    assert config.scope == "thread"
    assert observation.model is None and reflection.model is None
    assert observation.message_tokens == 30_000
    assert observation.buffer_tokens == 0.2
    assert observation.buffer_activation == 0.8
    assert observation.block_after == 1.2
    assert observation.previous_observer_tokens == 2_000
    assert observation.max_tokens_per_batch == 10_000
    assert observation.buffer_on_idle is False
    assert observation.instruction is None and reflection.instruction is None
    assert observation.thread_title is False
    assert observation.extract == () and reflection.extract == ()
    assert observation.observe_attachments is True
    assert observation.continuation_hints is True and reflection.continuation_hints is True
    assert reflection.observation_tokens == 40_000
    assert reflection.buffer_activation == 0.5
    assert reflection.block_after == 1.2
    assert reflection.activate_after_idle is None
    assert reflection.activate_on_provider_change is False
    assert config.activate_after_idle is None
    assert config.activate_on_provider_change is False
    assert config.share_token_budget is False
    assert config.temporal_markers is False
    assert config.retrieval is None
    assert config.obscure_thread_ids is False
    assert config.failure_policy == "abort"
    assert config.tokenizer == "tiktoken:o200k_base"
    retry = config.model_retry
    assert (retry.max_retries, retry.initial_delay_ms, retry.max_delay_ms, retry.jitter) == (
        4,
        500,
        30_000,
        0.2,
    )
    assert config.buffering_enabled


def test_provider_options_default_to_the_reference_thinking_budgets() -> None:
    config = parse_memory_config({})
    assert config.observation.provider_options == {"google": {"thinkingConfig": {"thinkingBudget": 215}}}
    assert config.reflection.provider_options == {"google": {"thinkingConfig": {"thinkingBudget": 1024}}}


def test_config_is_immutable() -> None:
    config = parse_memory_config(None)
    with pytest.raises(ValidationError):
        config.scope = "resource"


# ------------------------------------------------------------------------------------- key spelling


FULL_CAMEL: dict[str, Any] = {
    "scope": "thread",
    "observation": {
        "model": {"upTo": {"8000": "openai/gpt-5-mini", "100000": "default"}},
        "messageTokens": 20_000,
        "bufferTokens": 0.25,
        "bufferActivation": 5_000,
        "blockAfter": 1.5,
        "previousObserverTokens": False,
        "maxTokensPerBatch": 5_000,
        "bufferOnIdle": True,
        "instruction": "Note tool usage.",
        "threadTitle": True,
        "extract": [
            {
                "name": "user-profile",
                "instructions": "Stable facts.",
                "schema": {"type": "object", "properties": {"time_zone": {"type": "string"}}},
                "includePreviousExtraction": False,
                "metadataKeyPath": "profile.user",
            }
        ],
        "observeAttachments": ["image/*", "application/pdf"],
        "modelSettings": {"temperature": 0.1, "maxOutputTokens": 2_000},
        "providerOptions": {"openai": {"promptCacheRetention": "24h"}},
        "continuationHints": False,
        "activateAfterIdle": False,
        "activateOnProviderChange": True,
    },
    "reflection": {
        "observationTokens": 50_000,
        "bufferActivation": 0.4,
        "blockAfter": 70_000,
        "modelSettings": {"topP": 0.9},
        "activateAfterIdle": "1h",
        "activateOnProviderChange": True,
    },
    "activateAfterIdle": "5m",
    "activateOnProviderChange": True,
    "temporalMarkers": True,
    "retrieval": {"vector": True, "scope": "thread", "instructions": "Recall carefully."},
    "obscureThreadIds": True,
    "failurePolicy": "continue",
    "tokenizer": "tokenx",
    "modelRetry": {"maxRetries": 2, "initialDelayMs": 100, "maxDelayMs": 1_000, "jitter": 0.1},
}

FULL_SNAKE: dict[str, Any] = {
    "scope": "thread",
    "observation": {
        "model": {"up_to": {8000: "openai/gpt-5-mini", 100000: "default"}},
        "message_tokens": 20_000,
        "buffer_tokens": 0.25,
        "buffer_activation": 5_000,
        "block_after": 1.5,
        "previous_observer_tokens": False,
        "max_tokens_per_batch": 5_000,
        "buffer_on_idle": True,
        "instruction": "Note tool usage.",
        "thread_title": True,
        "extract": [
            {
                "name": "user-profile",
                "instructions": "Stable facts.",
                "schema": {"type": "object", "properties": {"time_zone": {"type": "string"}}},
                "include_previous_extraction": False,
                "metadata_key_path": "profile.user",
            }
        ],
        "observe_attachments": ["image/*", "application/pdf"],
        "model_settings": {"temperature": 0.1, "max_output_tokens": 2_000},
        "provider_options": {"openai": {"promptCacheRetention": "24h"}},
        "continuation_hints": False,
        "activate_after_idle": False,
        "activate_on_provider_change": True,
    },
    "reflection": {
        "observation_tokens": 50_000,
        "buffer_activation": 0.4,
        "block_after": 70_000,
        "model_settings": {"top_p": 0.9},
        "activate_after_idle": "1h",
        "activate_on_provider_change": True,
    },
    "activate_after_idle": "5m",
    "activate_on_provider_change": True,
    "temporal_markers": True,
    "retrieval": {"vector": True, "scope": "thread", "instructions": "Recall carefully."},
    "obscure_thread_ids": True,
    "failure_policy": "continue",
    "tokenizer": "tokenx",
    "model_retry": {"max_retries": 2, "initial_delay_ms": 100, "max_delay_ms": 1_000, "jitter": 0.1},
}


def test_camel_and_snake_case_keys_are_equivalent_at_every_level() -> None:
    camel, snake = parse_memory_config(FULL_CAMEL), parse_memory_config(FULL_SNAKE)
    assert camel == snake
    assert camel.observation.model == ModelByInputTokens(up_to={8000: "openai/gpt-5-mini", 100000: "default"})
    assert camel.observation.extract[0].include_previous_extraction is False
    assert camel.reflection.model_settings.top_p == 0.9
    assert camel.model_retry.max_delay_ms == 1_000
    assert camel.activate_after_idle == 300_000
    assert camel.reflection.activate_after_idle == 3_600_000
    assert camel.observation.activate_after_idle is False


def test_free_form_keys_inside_provider_options_and_schemas_are_kept_as_written() -> None:
    config = parse_memory_config(FULL_SNAKE)
    assert config.observation.provider_options == {"openai": {"promptCacheRetention": "24h"}}
    schema = config.observation.extract[0].schema_
    assert schema is not None and "time_zone" in schema["properties"]


def test_the_same_option_spelled_twice_is_an_error() -> None:
    value, rule = problem_for(
        {"observation": {"messageTokens": 1_000, "message_tokens": 2_000}}, "observation.messageTokens"
    )
    assert value == 2_000
    assert "given twice" in rule and "message_tokens" in rule


@pytest.mark.parametrize(
    ("raw", "option"),
    [
        ({"messageTokens": 1_000}, "messageTokens"),
        ({"observation": {"foo_bar": 1}}, "observation.foo_bar"),
        ({"observation": {"modelSettings": {"temprature": 0.2}}}, "observation.modelSettings.temprature"),
        (
            {"reflection": {"extract": [{"name": "x", "instructions": "y", "oops": 1}]}},
            "reflection.extract[0].oops",
        ),
        ({"retrieval": {"vector": True, "depth": 3}}, "retrieval.depth"),
        ({"modelRetry": {"retries": 3}}, "modelRetry.retries"),
    ],
)
def test_unknown_keys_are_errors_naming_the_key(raw: dict[str, Any], option: str) -> None:
    _, rule = problem_for(raw, option)
    assert rule.startswith("unknown option")


@pytest.mark.parametrize(
    ("raw", "option", "nearest"),
    [
        ({"observation": {"mesageTokens": 1_000}}, "observation.mesageTokens", "messageTokens"),
        (
            {"observation": {"modelSettings": {"temprature": 0.2}}},
            "observation.modelSettings.temprature",
            "temperature",
        ),
        (
            {"reflection": {"extract": [{"name": "x", "instruction": "y"}]}},
            "reflection.extract[0].instruction",
            "instructions",
        ),
        ({"retrieval": {"vectors": True}}, "retrieval.vectors", "vector"),
        ({"modelRetry": {"retries": 3}}, "modelRetry.retries", "maxRetries"),
        ({"failurePolcy": "abort"}, "failurePolcy", "failurePolicy"),
    ],
)
def test_an_unknown_option_names_the_nearest_known_one(
    raw: dict[str, Any], option: str, nearest: str
) -> None:
    _, rule = problem_for(raw, option)
    assert rule == f"unknown option (did you mean {nearest!r}?)"


def test_an_unknown_option_like_no_other_gets_no_suggestion() -> None:
    _, rule = problem_for({"observation": {"foo_bar": 1}}, "observation.foo_bar")
    assert rule == "unknown option"


# --------------------------------------------------------------------------------------- the error


def test_config_error_names_option_value_and_rule() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_memory_config({"observation": {"messageTokens": 0}})
    error = caught.value
    assert isinstance(error, ValueError)
    assert (error.option, error.value) == ("observation.messageTokens", 0)
    assert "greater than 0" in error.rule
    assert "observation.messageTokens" in str(error) and "= 0" in str(error)


def test_config_error_lists_every_problem() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_memory_config({"scope": "galaxy", "failurePolicy": "retry", "tokenizer": "words"})
    options = {problem.option for problem in caught.value.problems}
    assert options == {"scope", "failurePolicy", "tokenizer"}
    assert "3 problems" in str(caught.value)


def test_a_non_mapping_configuration_is_rejected() -> None:
    with pytest.raises(ConfigError, match="object of options"):
        parse_memory_config(["observation"])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- model


@pytest.mark.parametrize("model", ["openai/gpt-5-mini", "default", "om-local/extractive", "openrouter/a/b"])
def test_model_accepts_provider_slash_model_or_default(model: str) -> None:
    assert parse_memory_config({"model": model}).model == model


@pytest.mark.parametrize("model", ["gpt-5-mini", "", "openai/", 42, True])
def test_model_rejects_other_values(model: object) -> None:
    value, rule = problem_for({"model": model}, "model")
    assert value == model
    assert "provider/model" in rule


def test_model_by_input_tokens_accepts_string_keys_and_sorts_tiers() -> None:
    config = parse_memory_config({"model": {"upTo": {"100000": "google/gemini-2.5-pro", "8000": "default"}}})
    assert isinstance(config.model, ModelByInputTokens)
    assert list(config.model.up_to.items()) == [(8000, "default"), (100000, "google/gemini-2.5-pro")]


@pytest.mark.parametrize(
    ("tiers", "option", "rule_part"),
    [
        ({"many": "openai/gpt-5"}, "model.upTo.many", "positive whole token count"),
        ({"0": "openai/gpt-5"}, "model.upTo.0", "positive whole token count"),
        ({"1000": "gpt-5"}, "model.upTo.1000", "provider/model"),
        ({}, "model.upTo", "non-empty"),
    ],
)
def test_model_by_input_tokens_rejects_bad_tiers(tiers: dict[str, str], option: str, rule_part: str) -> None:
    _, rule = problem_for({"model": {"upTo": tiers}}, option)
    assert rule_part in rule


@pytest.mark.parametrize("role", ["observation", "reflection"])
def test_top_level_model_cannot_be_combined_with_a_role_model(role: str) -> None:
    value, rule = problem_for(
        {"model": "openai/gpt-5", role: {"model": "openai/gpt-5-mini"}}, f"{role}.model"
    )
    assert value == "openai/gpt-5-mini"
    assert "top-level model" in rule


def test_role_models_can_be_set_together() -> None:
    config = parse_memory_config({"observation": {"model": "a/b"}, "reflection": {"model": "c/d"}})
    assert (config.observation.model, config.reflection.model) == ("a/b", "c/d")


# ------------------------------------------------------------------------------------------- scope


def test_scope_must_be_thread_or_resource() -> None:
    value, rule = problem_for({"scope": "global"}, "scope")
    assert value == "global" and "thread" in rule and "resource" in rule


def test_resource_scope_disables_buffering_and_obscures_thread_ids() -> None:
    config = parse_memory_config({"scope": "resource"})
    assert config.buffering_enabled is False
    assert config.observation.buffer_tokens is False
    assert config.observation.block_after is None and config.reflection.block_after is None
    assert config.obscure_thread_ids is True


def test_obscure_thread_ids_can_be_set_explicitly() -> None:
    assert parse_memory_config({"scope": "resource", "obscureThreadIds": False}).obscure_thread_ids is False
    assert parse_memory_config({"obscureThreadIds": True}).obscure_thread_ids is True


@pytest.mark.parametrize(
    ("raw", "option"),
    [
        ({"observation": {"bufferTokens": 0.2}}, "observation.bufferTokens"),
        ({"observation": {"bufferActivation": 0.5}}, "observation.bufferActivation"),
        ({"reflection": {"bufferActivation": 0.5}}, "reflection.bufferActivation"),
        ({"observation": {"blockAfter": 1.5}}, "observation.blockAfter"),
        ({"reflection": {"blockAfter": 1.5}}, "reflection.blockAfter"),
    ],
)
def test_resource_scope_rejects_explicit_buffering_options(raw: dict[str, Any], option: str) -> None:
    _, rule = problem_for({"scope": "resource", **raw}, option)
    assert "resource scope" in rule


def test_resource_scope_accepts_buffering_explicitly_off() -> None:
    config = parse_memory_config({"scope": "resource", "observation": {"bufferTokens": False}})
    assert config.buffering_enabled is False


def test_thread_scope_needs_a_thread_id_at_use_time() -> None:
    with pytest.raises(ConfigError) as caught:
        require_thread_id(parse_memory_config(None), None)
    assert caught.value.option == "scope" and "thread id" in caught.value.rule
    require_thread_id(parse_memory_config(None), "thread-1")
    require_thread_id(parse_memory_config({"scope": "resource"}), None)


# ------------------------------------------------------------------------------ observation numbers


@pytest.mark.parametrize("value", [0, -5, True, "many", 1.5])
def test_message_tokens_must_be_a_positive_whole_number(value: object) -> None:
    problem_value, _ = problem_for({"observation": {"messageTokens": value}}, "observation.messageTokens")
    assert problem_value == value


@pytest.mark.parametrize(
    ("value", "stored"), [(0.2, 0.2), (0.999, 0.999), (1, 1), (5_000, 5_000), (False, False)]
)
def test_buffer_tokens_accepts_ratios_absolutes_and_false(value: object, stored: object) -> None:
    assert parse_memory_config({"observation": {"bufferTokens": value}}).observation.buffer_tokens == stored


@pytest.mark.parametrize(
    ("value", "rule_part"),
    [
        (0, "> 0"),
        (-0.5, "> 0"),
        (True, "or false"),
        (1.5, "whole number"),
        (30_000, "below observation.messageTokens (30000)"),
        (40_000, "below observation.messageTokens (30000)"),
        (0.00001, "resolves to 0 tokens"),
    ],
)
def test_buffer_tokens_rejections(value: object, rule_part: str) -> None:
    problem_value, rule = problem_for({"observation": {"bufferTokens": value}}, "observation.bufferTokens")
    assert problem_value == value
    assert rule_part in rule


def test_buffer_tokens_ratio_must_resolve_below_message_tokens() -> None:
    # 0.99 × 10 rounds to 10, which is not below messageTokens.
    _, rule = problem_for(
        {"observation": {"messageTokens": 10, "bufferTokens": 0.99}}, "observation.bufferTokens"
    )
    assert "resolves to 10" in rule


def test_buffer_tokens_false_disables_all_async_buffering() -> None:
    config = parse_memory_config({"observation": {"bufferTokens": False}})
    assert config.buffering_enabled is False
    assert config.observation.block_after is None and config.reflection.block_after is None


@pytest.mark.parametrize("value", [0.1, 0.8, 1, 1_000, 5_000])
def test_buffer_activation_accepts_fractions_and_absolute_counts(value: float) -> None:
    assert (
        parse_memory_config({"observation": {"bufferActivation": value}}).observation.buffer_activation
        == value
    )


@pytest.mark.parametrize(
    ("value", "rule_part"),
    [
        (0, "(0,1]"),
        (-0.2, "(0,1]"),
        (1.5, "(1,1000)"),
        (999, "(1,1000)"),
        (30_000, "below observation.messageTokens"),
        (True, "number"),
    ],
)
def test_buffer_activation_rejections(value: object, rule_part: str) -> None:
    problem_value, rule = problem_for(
        {"observation": {"bufferActivation": value}}, "observation.bufferActivation"
    )
    assert problem_value == value
    assert rule_part in rule


@pytest.mark.parametrize(("value", "stored"), [(1, 1.0), (1.5, 1.5), (99.5, 99.5), (30_001, 30_001)])
def test_block_after_accepts_multipliers_and_absolutes_above_message_tokens(
    value: float, stored: float
) -> None:
    assert parse_memory_config({"observation": {"blockAfter": value}}).observation.block_after == stored


@pytest.mark.parametrize(
    ("value", "rule_part"),
    [
        (0.9, "[1,100)"),
        (0, "[1,100)"),
        (100, "above observation.messageTokens (30000)"),
        (30_000, "above observation.messageTokens (30000)"),
        ("1.2x", "number"),
    ],
)
def test_block_after_rejections(value: object, rule_part: str) -> None:
    problem_value, rule = problem_for({"observation": {"blockAfter": value}}, "observation.blockAfter")
    assert problem_value == value
    assert rule_part in rule


def test_block_after_is_only_valid_with_buffering() -> None:
    value, rule = problem_for(
        {"observation": {"bufferTokens": False, "blockAfter": 1.5}}, "observation.blockAfter"
    )
    assert value == 1.5 and "only valid with async buffering" in rule
    value, rule = problem_for(
        {"observation": {"bufferTokens": False}, "reflection": {"blockAfter": 2}}, "reflection.blockAfter"
    )
    assert value == 2 and "only valid with async buffering" in rule


def test_block_after_absolute_small_values_fit_small_thresholds() -> None:
    config = parse_memory_config(
        {"observation": {"messageTokens": 50, "bufferTokens": 10, "blockAfter": 100}}
    )
    assert config.observation.block_after == 100


@pytest.mark.parametrize(("value", "stored"), [(0, 0), (500, 500), (False, False)])
def test_previous_observer_tokens(value: object, stored: object) -> None:
    config = parse_memory_config({"observation": {"previousObserverTokens": value}})
    assert config.observation.previous_observer_tokens == stored


@pytest.mark.parametrize("value", [-1, True, 1.5])
def test_previous_observer_tokens_rejections(value: object) -> None:
    problem_for({"observation": {"previousObserverTokens": value}}, "observation.previousObserverTokens")


def test_max_tokens_per_batch_must_be_positive() -> None:
    problem_for({"observation": {"maxTokensPerBatch": 0}}, "observation.maxTokensPerBatch")


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (True, True),
        (False, False),
        ("auto", "auto"),
        (["image/*", "Application/PDF", "*"], ("image/*", "application/pdf", "*")),
    ],
)
def test_observe_attachments(value: object, stored: object) -> None:
    assert (
        parse_memory_config({"observation": {"observeAttachments": value}}).observation.observe_attachments
        == stored
    )


@pytest.mark.parametrize("value", ["yes", ["images"], [3], {"image": True}])
def test_observe_attachments_rejections(value: object) -> None:
    problem_for({"observation": {"observeAttachments": value}}, "observation.observeAttachments")


@pytest.mark.parametrize("option", ["bufferOnIdle", "threadTitle", "continuationHints"])
def test_observation_flags_must_be_booleans(option: str) -> None:
    problem_for({"observation": {option: "yes"}}, f"observation.{option}")


def test_instructions_must_be_text() -> None:
    problem_for({"observation": {"instruction": 5}}, "observation.instruction")
    assert (
        parse_memory_config({"reflection": {"instruction": "Keep dates."}}).reflection.instruction
        == "Keep dates."
    )


# -------------------------------------------------------------------------------------- extractors


def test_extractor_defaults() -> None:
    config = parse_memory_config(
        {"reflection": {"extract": [{"name": "open-questions", "instructions": "List them."}]}}
    )
    extractor = config.reflection.extract[0]
    assert extractor == Extractor(name="open-questions", instructions="List them.")
    assert extractor.schema_ is None
    assert extractor.include_previous_extraction is True
    assert extractor.persisted_key_path == "extracted.open-questions"


def test_extractor_metadata_key_path_can_be_set_or_disabled() -> None:
    extractors = parse_memory_config(
        {
            "observation": {
                "extract": [
                    {"name": "a", "instructions": "x", "metadataKeyPath": "profile.a"},
                    {"name": "b", "instructions": "x", "metadataKeyPath": False},
                ]
            }
        }
    ).observation.extract
    assert [e.persisted_key_path for e in extractors] == ["profile.a", None]


@pytest.mark.parametrize(
    ("extractor", "option", "rule_part"),
    [
        ({"name": "!!!", "instructions": "x"}, "observation.extract[0].name", "slug"),
        ({"name": "2FA codes", "instructions": "x"}, "observation.extract[0].name", "starts with a letter"),
        ({"name": "current-task", "instructions": "x"}, "observation.extract[0].name", "reserved"),
        ({"name": "Current Task", "instructions": "x"}, "observation.extract[0].name", "reserved"),
        ({"name": "Thread", "instructions": "x"}, "observation.extract[0].name", "reserved"),
        ({"name": "a", "instructions": "  "}, "observation.extract[0].instructions", "empty"),
        (
            {"name": "a", "instructions": "x", "schema": "object"},
            "observation.extract[0].schema",
            "JSON Schema",
        ),
        (
            {"name": "a", "instructions": "x", "metadataKeyPath": "a..b"},
            "observation.extract[0].metadataKeyPath",
            "path",
        ),
        ({"instructions": "x"}, "observation.extract[0].name", "required"),
    ],
)
def test_extractor_rejections(extractor: dict[str, Any], option: str, rule_part: str) -> None:
    _, rule = problem_for({"observation": {"extract": [extractor]}}, option)
    assert rule_part in rule


def test_extractor_names_must_be_unique() -> None:
    extract = [{"name": "a", "instructions": "x"}, {"name": "a", "instructions": "y"}]
    _, rule = problem_for({"observation": {"extract": extract}}, "observation.extract")
    assert "unique" in rule


# ------------------------------------------------------------------------------------- reflection


@pytest.mark.parametrize("value", [0.1, 0.5, 1])
def test_reflection_buffer_activation_in_zero_one(value: float) -> None:
    assert (
        parse_memory_config({"reflection": {"bufferActivation": value}}).reflection.buffer_activation == value
    )


@pytest.mark.parametrize("value", [0, 1.5, 1_000, -1])
def test_reflection_buffer_activation_rejections(value: float) -> None:
    _, rule = problem_for({"reflection": {"bufferActivation": value}}, "reflection.bufferActivation")
    assert "(0,1]" in rule


def test_reflection_observation_tokens_must_be_positive() -> None:
    problem_for({"reflection": {"observationTokens": 0}}, "reflection.observationTokens")


def test_reflection_block_after_absolute_must_exceed_observation_tokens() -> None:
    _, rule = problem_for({"reflection": {"blockAfter": 40_000}}, "reflection.blockAfter")
    assert "above reflection.observationTokens (40000)" in rule
    assert parse_memory_config({"reflection": {"blockAfter": 40_001}}).reflection.block_after == 40_001


# ------------------------------------------------------------------------------- model settings


def test_model_settings_validation() -> None:
    problem_for(
        {"observation": {"modelSettings": {"temperature": -0.1}}}, "observation.modelSettings.temperature"
    )
    problem_for(
        {"reflection": {"modelSettings": {"maxOutputTokens": 0}}}, "reflection.modelSettings.maxOutputTokens"
    )
    problem_for({"reflection": {"modelSettings": {"topP": 1.5}}}, "reflection.modelSettings.topP")
    settings = parse_memory_config({"observation": {"modelSettings": {"stopSequences": ["</x>"]}}})
    assert settings.observation.model_settings.stop_sequences == ("</x>",)


def test_provider_options_must_map_providers_to_objects() -> None:
    _, rule = problem_for(
        {"observation": {"providerOptions": {"openai": "fast"}}}, "observation.providerOptions"
    )
    assert "provider names" in rule


# -------------------------------------------------------------------------------- top-level flags


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (300_000, 300_000),
        (0, 0),
        ("5m", 300_000),
        ("1hr", 3_600_000),
        ("90 sec", 90_000),
        ("1.5h", 5_400_000),
        ("250ms", 250),
        ("2 Minutes", 120_000),
        ("auto", "auto"),
        (False, None),
    ],
)
def test_activate_after_idle_parsing(value: object, stored: object) -> None:
    assert parse_memory_config({"activateAfterIdle": value}).activate_after_idle == stored


@pytest.mark.parametrize("value", ["5 weeks", -1, True, "soon", "5", float("inf")])
def test_activate_after_idle_rejections(value: object) -> None:
    problem_value, rule = problem_for({"activateAfterIdle": value}, "activateAfterIdle")
    assert problem_value == value
    assert rule


def test_reflection_does_not_inherit_idle_options() -> None:
    config = parse_memory_config({"activateAfterIdle": "5m", "activateOnProviderChange": True})
    assert config.reflection.activate_after_idle is None
    assert config.reflection.activate_on_provider_change is False


def test_share_token_budget_requires_buffering_off() -> None:
    value, rule = problem_for({"shareTokenBudget": True}, "shareTokenBudget")
    assert value is True and "bufferTokens: false" in rule
    assert parse_memory_config(
        {"shareTokenBudget": True, "observation": {"bufferTokens": False}}
    ).share_token_budget
    assert parse_memory_config({"shareTokenBudget": True, "scope": "resource"}).share_token_budget


@pytest.mark.parametrize(
    "option", ["temporalMarkers", "activateOnProviderChange", "shareTokenBudget", "obscureThreadIds"]
)
def test_top_level_flags_must_be_booleans(option: str) -> None:
    problem_for({option: "true"}, option)


def test_retrieval_forms() -> None:
    assert parse_memory_config({"retrieval": False}).retrieval is None
    assert parse_memory_config({"retrieval": True}).retrieval == RetrievalConfig(
        vector=False, scope="resource"
    )
    config = parse_memory_config({"retrieval": {"scope": "thread", "instructions": "Use recall."}})
    assert config.retrieval == RetrievalConfig(scope="thread", instructions="Use recall.")
    problem_for({"retrieval": {"scope": "everywhere"}}, "retrieval.scope")
    problem_for({"retrieval": "yes"}, "retrieval")


@pytest.mark.parametrize("policy", ["abort", "continue"])
def test_failure_policy_values(policy: str) -> None:
    assert parse_memory_config({"failurePolicy": policy}).failure_policy == policy


@pytest.mark.parametrize("tokenizer", ["tokenx", "tiktoken:o200k_base", "tiktoken:cl100k_base"])
def test_tokenizer_values(tokenizer: str) -> None:
    assert parse_memory_config({"tokenizer": tokenizer}).tokenizer == tokenizer


@pytest.mark.parametrize("tokenizer", ["tiktoken:nope", "cl100k_base", "sentencepiece", 5])
def test_tokenizer_rejections(tokenizer: object) -> None:
    _, rule = problem_for({"tokenizer": tokenizer}, "tokenizer")
    assert "tokenx" in rule


def test_model_retry_validation() -> None:
    _, rule = problem_for(
        {"modelRetry": {"initialDelayMs": 5_000, "maxDelayMs": 1_000}}, "modelRetry.maxDelayMs"
    )
    assert "initialDelayMs" in rule
    problem_for({"modelRetry": {"jitter": 1.5}}, "modelRetry.jitter")
    problem_for({"modelRetry": {"maxRetries": -1}}, "modelRetry.maxRetries")
    assert parse_memory_config({"modelRetry": {"maxRetries": 0}}).model_retry.max_retries == 0


# ------------------------------------------------------------------------------------- round trip


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {"scope": "resource"},
        FULL_CAMEL,
        {"shareTokenBudget": True, "observation": {"bufferTokens": False}, "retrieval": True},
        {"model": {"upTo": {"5000": "om-local/extractive"}}, "activateAfterIdle": "auto"},
    ],
)
def test_to_json_is_camel_case_and_round_trips(raw: dict[str, Any] | None) -> None:
    config = parse_memory_config(raw)
    document = config.to_json()
    assert "observation" in document and "messageTokens" in document["observation"]
    assert not any("_" in key for key in document if key != "schema")
    assert parse_memory_config(document) == config


def test_to_json_writes_resolved_values() -> None:
    document = parse_memory_config(
        {"activateAfterIdle": "5m", "observation": {"bufferTokens": 5_000}}
    ).to_json()
    assert document["activateAfterIdle"] == 300_000
    assert document["observation"]["bufferTokens"] == 5_000
    assert document["observation"]["blockAfter"] == 1.2


def test_config_objects_construct_directly_with_snake_case() -> None:
    config = MemoryConfig(observation={"message_tokens": 1_000, "buffer_tokens": False})  # type: ignore[arg-type]
    assert config.observation.block_after is None and config.reflection.block_after is None


# ------------------------------------------------------------------------------------------ layers


def test_merge_deep_merges_later_layers_win_and_spellings_mix() -> None:
    profile = {"observation": {"messageTokens": 20_000, "bufferActivation": 0.7}, "temporalMarkers": True}
    thread = {"observation": {"message_tokens": 25_000}, "temporal_markers": False}
    merged = merge_config_layers(profile, None, thread)
    assert merged == {
        "observation": {"messageTokens": 25_000, "bufferActivation": 0.7},
        "temporalMarkers": False,
    }
    config = parse_memory_config(merged)
    assert config.observation.message_tokens == 25_000 and config.observation.buffer_activation == 0.7


def test_merge_none_resets_an_option_to_its_default() -> None:
    merged = merge_config_layers(
        {"observation": {"bufferTokens": False}}, {"observation": {"bufferTokens": None}}
    )
    assert parse_memory_config(merged).observation.buffer_tokens == 0.2


def test_merge_replaces_model_specs_and_lists_whole() -> None:
    merged = merge_config_layers(
        {
            "model": {"upTo": {"1000": "a/b", "9000": "c/d"}},
            "observation": {"extract": [{"name": "a", "instructions": "x"}]},
        },
        {"model": {"upTo": {"5000": "e/f"}}, "observation": {"extract": []}},
    )
    assert merged == {"model": {"upTo": {"5000": "e/f"}}, "observation": {"extract": []}}


def test_merge_role_model_supersedes_top_level_model_and_back() -> None:
    merged = merge_config_layers({"model": "a/b"}, {"observation": {"model": "c/d"}})
    assert parse_memory_config(merged).observation.model == "c/d"
    assert "model" not in merged
    merged = merge_config_layers(
        {"reflection": {"model": "c/d", "observationTokens": 1_000}}, {"model": "a/b"}
    )
    assert merged == {"reflection": {"observationTokens": 1_000}, "model": "a/b"}


def test_merge_keeps_free_form_keys_and_rejects_bad_layers() -> None:
    merged = merge_config_layers({"observation": {"provider_options": {"omLocal": {"latency_ms": 5}}}})
    assert merged == {"observation": {"providerOptions": {"omLocal": {"latency_ms": 5}}}}
    with pytest.raises(ConfigError):
        merge_config_layers({"scope": "thread"}, "scope=resource")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="given twice"):
        merge_config_layers({"shareTokenBudget": True, "share_token_budget": False})


def test_retrieval_embedder_defaults_to_the_local_one_and_is_checked() -> None:
    from om_core.bootstrap import configured_models

    config = parse_memory_config({"model": "om-local/extractive", "retrieval": {"vector": True}})
    assert config.retrieval is not None and config.retrieval.embedder == "om-local/hashing"
    assert configured_models(config) == ["om-local/extractive", "om-local/hashing"]
    chosen = parse_memory_config({"retrieval": {"vector": True, "embedder": "openai/text-embedding-3-small"}})
    assert chosen.retrieval is not None and chosen.retrieval.embedder == "openai/text-embedding-3-small"
    without_vectors = parse_memory_config({"model": "om-local/extractive", "retrieval": True})
    assert configured_models(without_vectors) == ["om-local/extractive"]
    with pytest.raises(ConfigError, match=r"retrieval\.embedder"):
        parse_memory_config({"retrieval": {"vector": True, "embedder": "default"}})
