"""examples/profile.yaml loads with the real profile loader, holds every option, and each at its default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from om_core.domain.config import (
    MemoryConfig,
    ModelRetryConfig,
    ModelSettings,
    ObservationConfig,
    ReflectionConfig,
    parse_memory_config,
)
from om_core.settings import ServerSettings, read_profile

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "profile.yaml"


def _options(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def test_the_example_profile_loads_with_every_option_at_its_default() -> None:
    # "default" is the default model named explicitly; every other value is what an empty profile gives
    assert parse_memory_config(read_profile(EXAMPLE)) == parse_memory_config({"model": "default"})
    assert ServerSettings(profile=EXAMPLE).memory_config() == parse_memory_config({"model": "default"})


def test_the_example_profile_names_every_option() -> None:
    document: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    assert set(document) == _options(MemoryConfig)
    for section, model in (("observation", ObservationConfig), ("reflection", ReflectionConfig)):
        assert set(document[section]) == _options(model), section
        assert set(document[section]["modelSettings"]) == _options(ModelSettings), section
    assert set(document["modelRetry"]) == _options(ModelRetryConfig)
