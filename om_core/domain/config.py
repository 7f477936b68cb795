"""The memory configuration: every option of docs/configuration.md, validated when it is loaded.

Options are accepted under Mastra's camelCase names and their snake_case equivalents, at every level. A
validated ``MemoryConfig`` holds resolved values: options whose default depends on other options (buffering
in resource scope, ``blockAfter``, ``obscureThreadIds``) are filled in here, so every reader sees the same
answer. The threshold arithmetic over these values lives in ``om_core.domain.thresholds``.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeAlias, TypeVar, get_args

import jsonschema
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from om_core.domain.lifecycle import LIFECYCLE_EVENTS
from om_core.domain.observer_output import OUTPUT_TAGS
from om_core.domain.tokens import TIKTOKEN_ENCODINGS

Scope: TypeAlias = Literal["thread", "resource"]
FailurePolicy: TypeAlias = Literal["abort", "continue"]
IdleTTL: TypeAlias = int | Literal["auto"]
BufferTokens: TypeAlias = int | float | Literal[False]
AttachmentPolicy: TypeAlias = bool | Literal["auto"] | tuple[str, ...]

DEFAULT_TOKENIZER = "tiktoken:o200k_base"
DEFAULT_BLOCK_AFTER = 1.2
# The built-in extractors, the XML tags the Observer/Reflector output already uses, and the tags Mastra
# also reserves because prompts and transcripts are built of them.
RESERVED_EXTRACTOR_NAMES = frozenset(OUTPUT_TAGS) | {
    "observation", "thread", "message", "messages", "conversation", "history", "system", "user",
    "assistant", "tool",
}  # fmt: skip

# Subtrees whose keys belong to someone else (provider SDKs, JSON Schema): never renamed, never pruned.
_FREE_FORM_KEYS = frozenset({"providerOptions", "schema"})
_SLUG = re.compile(r"^[a-z](?:[a-z0-9-]*[a-z0-9])?$")
_SLUG_QUOTES = re.compile(r"['\"`]")
_SLUG_SEPARATORS = re.compile(r"[^a-z0-9]+")
_MODEL_ID = re.compile(r"^[^/\s]+/\S+$")
_MIME_PATTERN = re.compile(r"^(\*|[\w.+-]+/(\*|[\w.+-]+))$")
_KEY_PATH = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_DURATION = re.compile(
    r"^(?P<amount>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>ms|msecs?|milliseconds?|s|secs?|seconds?|m|mins?|minutes?"
    r"|h|hrs?|hours?)$",
    re.IGNORECASE,
)
_UNIT_MS = {"ms": 1, "msec": 1, "millisecond": 1, "s": 1_000, "sec": 1_000, "second": 1_000}
_UNIT_MS |= {"m": 60_000, "min": 60_000, "minute": 60_000, "h": 3_600_000, "hr": 3_600_000, "hour": 3_600_000}


# --------------------------------------------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One violated rule: the dotted camelCase option path, the offending value, the rule in words."""

    option: str
    value: object
    rule: str

    def under(self, prefix: str) -> ConfigProblem:
        return ConfigProblem(_join_path(prefix, self.option), self.value, self.rule)

    def __str__(self) -> str:
        return f"{self.option or '<config>'} = {_show(self.value)}: {self.rule}"


class ConfigError(ValueError):
    """An invalid memory configuration. ``problems`` lists every violation found; the first is also
    exposed as ``option``/``value``/``rule``."""

    def __init__(self, option: str, value: object, rule: str, *further: ConfigProblem) -> None:
        self.problems: tuple[ConfigProblem, ...] = (ConfigProblem(option, value, rule), *further)
        super().__init__(_describe(self.problems))

    @classmethod
    def of(cls, problems: Sequence[ConfigProblem]) -> ConfigError:
        first, *rest = problems
        return cls(first.option, first.value, first.rule, *rest)

    @classmethod
    def from_validation(cls, error: ValidationError, model: type[BaseModel]) -> ConfigError:
        """The problems of validating ``model``; an unknown option is told the nearest known name."""
        return cls.of(_problems_from(error, model))

    @property
    def option(self) -> str:
        return self.problems[0].option

    @property
    def value(self) -> object:
        return self.problems[0].value

    @property
    def rule(self) -> str:
        return self.problems[0].rule


def _describe(problems: Sequence[ConfigProblem]) -> str:
    if len(problems) == 1:
        return f"invalid memory configuration: {problems[0]}"
    lines = "\n".join(f"  - {problem}" for problem in problems)
    return f"invalid memory configuration ({len(problems)} problems):\n{lines}"


def _show(value: object) -> str:
    try:
        shown = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        shown = repr(value)
    return shown if len(shown) <= 200 else shown[:197] + "..."


def _join_path(prefix: str, option: str) -> str:
    if not prefix:
        return option
    if not option:
        return prefix
    return prefix + option if option.startswith("[") else f"{prefix}.{option}"


def _dotted(loc: Iterable[int | str]) -> str:
    path = ""
    for part in loc:
        path = _join_path(path, f"[{part}]" if isinstance(part, int) else part)
    return path


def _problems_from(error: ValidationError, model: type[BaseModel]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for detail in error.errors():
        path = _dotted(detail["loc"])
        cause = detail.get("ctx", {}).get("error")
        if isinstance(cause, ConfigError):
            # Raised by our own validators with options relative to the location pydantic reports.
            problems.extend(problem.under(path) for problem in cause.problems)
        elif detail["type"] == "extra_forbidden":
            problems.append(ConfigProblem(path, detail["input"], _unknown_option(model, detail["loc"])))
        else:
            rule = str(detail["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")
            problems.append(ConfigProblem(path, detail["input"], rule))
    return problems


def _unknown_option(model: type[BaseModel], loc: Sequence[int | str]) -> str:
    known = _section_options(model, loc[:-1])
    nearest = difflib.get_close_matches(str(loc[-1]), known, n=1) if loc else []
    return f"unknown option (did you mean {nearest[0]!r}?)" if nearest else "unknown option"


def _section_options(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The option names (camelCase) of the section found at ``loc`` inside ``model``."""
    section: type[BaseModel] | None = model
    for part in loc:
        if section is None:
            return []
        if isinstance(part, int):
            continue  # an item of a list of sections: the section type was found from the list's type
        field = next((f for name, f in section.model_fields.items() if part in (name, f.alias)), None)
        section = _section_type(field.annotation) if field is not None else None
    if section is None:
        return []
    return [field.alias or name for name, field in section.model_fields.items()]


def _section_type(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next(filter(None, map(_section_type, get_args(annotation))), None)


_Model = TypeVar("_Model", bound=BaseModel)


def _validated(model: type[_Model], raw: object) -> _Model:
    """Validate a nested section from inside a field validator, keeping its problems' paths relative."""
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise ConfigError.from_validation(error, model) from None


# ------------------------------------------------------------------------------------- value parsing


def _require_number(value: object) -> float:
    # bool is an int in Python; `messageTokens: true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return float(value)


def _whole(number: float, what: str) -> int:
    if not number.is_integer():
        raise ValueError(f"{what} must be a whole number")
    return int(number)


def _not_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


PositiveTokens = Annotated[int, BeforeValidator(_not_bool), Field(gt=0)]


def round_half_up(value: float) -> int:
    """Mastra rounds with JavaScript's Math.round (halves go up), not Python's banker's rounding."""
    return math.floor(value + 0.5)


def _idle_ttl(value: object) -> IdleTTL | None:
    if value is None or value is False:
        return None
    if value is True:
        raise ValueError('must be a duration in ms, a string like "5m" or "1.5h", "auto" or false')
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == "auto":
            return "auto"
        match = _DURATION.match(text)
        if match is None:
            raise ValueError(
                'must be a duration such as 300000 (ms), "5m", "90 sec", "1hr" or "1.5h" '
                '(units: ms, s/sec, m/min, h/hr), "auto" or false'
            )
        unit = match["unit"].lower()
        # Plurals share their singular's factor; "ms" is a unit of its own, not a plural of "m".
        unit = unit.removesuffix("s") if len(unit) > 2 else unit
        return round_half_up(float(match["amount"]) * _UNIT_MS[unit])
    number = _require_number(value)
    if number < 0:
        raise ValueError("must be a non-negative number of milliseconds")
    return round_half_up(number)


def parse_activate_after_idle(value: object, option: str = "activateAfterIdle") -> IdleTTL | None:
    """Parse an ``activateAfterIdle`` value: ms number, duration string, ``"auto"``; ``None``/``False`` = off.

    Raises ``ConfigError`` naming ``option`` for anything else (``"5 weeks"``, ``-1``, ``true``).
    """
    try:
        return _idle_ttl(value)
    except ValueError as error:
        raise ConfigError(option, value, str(error)) from None


# ------------------------------------------------------------------------------------------ sections


class _Section(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="forbid",
        frozen=True,
    )


class ModelByInputTokens(_Section):
    """Pick a model by the size of the call's input: the smallest ``upTo`` bound that fits wins."""

    up_to: dict[int, str]

    @field_validator("up_to", mode="before")
    @classmethod
    def _tiers(cls, value: object) -> dict[int, str]:
        if not isinstance(value, Mapping) or not value:
            raise ValueError("must be a non-empty mapping of input-token bounds to models")
        tiers: dict[int, str] = {}
        problems: list[ConfigProblem] = []
        for raw_bound, model in value.items():
            bound = _tier_bound(raw_bound)
            if bound is None:
                problems.append(
                    ConfigProblem(str(raw_bound), raw_bound, "must be a positive whole token count")
                )
            elif not isinstance(model, str) or not _is_model_id(model):
                problems.append(ConfigProblem(str(raw_bound), model, 'must be "provider/model" or "default"'))
            elif bound in tiers:
                problems.append(ConfigProblem(str(raw_bound), raw_bound, "the same bound is given twice"))
            else:
                tiers[bound] = model
        if problems:
            raise ConfigError.of(problems)
        return dict(sorted(tiers.items()))


def _tier_bound(raw: object) -> int | None:
    # JSON object keys are strings; YAML keeps them as ints.
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        return raw
    return None


class ModelWithRetries(_Section):
    """One model of a fallback list (Mastra's ``ModelWithRetries``): tried with its own retry bound for
    transient errors, and left for the next entry when it still fails. ``maxRetries`` unset takes
    ``modelRetry.maxRetries``; an entry with ``enabled: false`` is skipped."""

    model: StrictStr
    max_retries: Annotated[int, BeforeValidator(_not_bool), Field(ge=0)] | None = None
    enabled: StrictBool = True

    @field_validator("model")
    @classmethod
    def _model_id(cls, value: str) -> str:
        if not _is_model_id(value):
            raise ValueError('must be "provider/model" or "default"')
        return value


ModelList: TypeAlias = tuple[ModelWithRetries, ...]
ModelSpec: TypeAlias = str | ModelByInputTokens | ModelList
_MODEL_RULE = (
    'must be "provider/model", "default", {upTo: {<input tokens>: model}} or a list of '
    "{model, maxRetries?, enabled?}"
)


def _model_list(value: Sequence[object]) -> ModelList:
    if not value:
        raise ValueError("a model list must name at least one model")
    entries: list[ModelWithRetries] = []
    problems: list[ConfigProblem] = []
    for index, item in enumerate(value):
        if isinstance(item, ModelWithRetries):
            entries.append(item)
        elif not isinstance(item, Mapping):
            problems.append(ConfigProblem(f"[{index}]", item, "must be {model, maxRetries?, enabled?}"))
        else:
            try:
                entries.append(_validated(ModelWithRetries, item))
            except ConfigError as error:
                problems.extend(problem.under(f"[{index}]") for problem in error.problems)
    if problems:
        raise ConfigError.of(problems)
    if not any(entry.enabled for entry in entries):
        raise ValueError("a model list needs at least one entry with enabled: true")
    return tuple(entries)


def _is_model_id(value: str) -> bool:
    return value == "default" or _MODEL_ID.match(value) is not None


def _model_spec(value: object) -> ModelSpec | None:
    if value is None or isinstance(value, ModelByInputTokens):
        return value
    if isinstance(value, str) and _is_model_id(value):
        return value
    if isinstance(value, Mapping):
        return _validated(ModelByInputTokens, value)
    if isinstance(value, list | tuple):
        return _model_list(value)
    raise ValueError(_MODEL_RULE)


def _api_base(value: object) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value.strip()):
        raise ValueError(
            'must be the http(s) URL of an OpenAI-compatible API, e.g. "http://127.0.0.1:8080/v1"'
        )
    return value.strip().rstrip("/")


class ModelSettings(_Section):
    """Call settings passed to the Observer/Reflector model; unset values fall back to the role defaults."""

    temperature: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] | None = None
    max_output_tokens: PositiveTokens | None = None
    top_p: Annotated[float, BeforeValidator(_not_bool), Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, BeforeValidator(_not_bool), Field(gt=0)] | None = None
    presence_penalty: Annotated[float, BeforeValidator(_not_bool)] | None = None
    frequency_penalty: Annotated[float, BeforeValidator(_not_bool)] | None = None
    seed: Annotated[int, BeforeValidator(_not_bool)] | None = None
    stop_sequences: tuple[StrictStr, ...] | None = None
    # where the calls go when not to the provider: an OpenAI-compatible server (docs/configuration.md)
    api_base: Annotated[str, BeforeValidator(_api_base)] | None = None


def _json_schema(value: object) -> object:
    """A JSON Schema checked against its own metaschema, its regular expressions compiled: a schema no
    validator can apply (``{"type": "florp"}``, a pattern ``"(["``) is refused where it is configured,
    not found failing at every cycle."""
    if value is None:
        return value
    if not isinstance(value, Mapping):
        raise ValueError("must be a JSON Schema object")
    validator = jsonschema.validators.validator_for(value)
    try:
        validator.check_schema(value)
    except jsonschema.SchemaError as error:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        raise ValueError(f"is not a valid JSON Schema: {error.message} (at schema{where})") from None
    return value


class Extractor(_Section):
    """A custom value the Observer or Reflector extracts; with ``schema``, a structured follow-up call."""

    name: StrictStr
    instructions: StrictStr
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    include_previous_extraction: StrictBool = True
    metadata_key_path: StrictStr | Literal[False] | None = None

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        slug = extractor_slug(value)
        if not _SLUG.match(slug):
            raise ValueError(
                "must give a slug that starts with a letter once lowercased, with every run of other "
                f"characters made a hyphen (gives {slug!r})"
            )
        if slug in RESERVED_EXTRACTOR_NAMES:
            raise ValueError(
                f"gives the reserved slug {slug!r} (reserved: {', '.join(sorted(RESERVED_EXTRACTOR_NAMES))})"
            )
        return value

    @property
    def slug(self) -> str:
        """The value's key in the models' answers (its XML tag) and in the thread's metadata."""
        return extractor_slug(self.name)

    @field_validator("instructions")
    @classmethod
    def _instructions(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("schema_", mode="before")
    @classmethod
    def _schema(cls, value: object) -> object:
        return _json_schema(value)

    @field_validator("metadata_key_path", mode="before")
    @classmethod
    def _key_path(cls, value: object) -> object:
        if isinstance(value, str) and not _KEY_PATH.match(value):
            raise ValueError("must be a dot-separated path such as 'extracted.profile', or false")
        if value is True:
            raise ValueError("must be a dot-separated path or false")
        return value

    @property
    def persisted_key_path(self) -> str | None:
        """Where the value is stored in the thread's OM metadata; ``None`` when persistence is off."""
        if self.metadata_key_path is False:
            return None
        return self.metadata_key_path or f"extracted.{self.slug}"


def extractor_slug(name: str) -> str:
    """Mastra's slug of an extractor name: lowercased, quotes dropped, every other run of characters that
    are not ASCII letters or digits made one hyphen, hyphens trimmed ("User profile" → "user-profile")."""
    return _SLUG_SEPARATORS.sub("-", _SLUG_QUOTES.sub("", name.strip().lower())).strip("-")


def _unique_extractors(extractors: tuple[Extractor, ...]) -> tuple[Extractor, ...]:
    seen: dict[str, str] = {}
    for extractor in extractors:
        if extractor.slug in seen:
            raise ValueError(
                f"extractor names must be unique once slugged: {seen[extractor.slug]!r} and "
                f"{extractor.name!r} both give {extractor.slug!r}"
            )
        seen[extractor.slug] = extractor.name
    return extractors


ProviderOptions: TypeAlias = dict[str, dict[str, Any]]


def _observe_attachments(value: object) -> AttachmentPolicy:
    if isinstance(value, bool):
        return value
    if value == "auto":
        return "auto"
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        bad = [item for item in value if not _MIME_PATTERN.match(item)]
        if bad:
            raise ValueError(f"mime patterns must look like 'image/png', 'image/*' or '*' (bad: {bad})")
        return tuple(item.lower() for item in value)
    raise ValueError('must be true, false, "auto" or a list of mime types (globs like "image/*" allowed)')


def _buffer_tokens(value: object) -> BufferTokens:
    if value is False:
        return False
    if value is True:
        raise ValueError("must be a ratio in (0,1), an absolute token count >= 1, or false")
    number = _require_number(value)
    if number <= 0:
        raise ValueError("must be > 0: a ratio in (0,1) of messageTokens or an absolute token count >= 1")
    return number if number < 1 else _whole(number, "an absolute bufferTokens")


def _observation_buffer_activation(value: object) -> float | int:
    number = _require_number(value)
    if number <= 0:
        raise ValueError("must be a fraction in (0,1] or an absolute token count >= 1000")
    if number <= 1:
        return number
    if number < 1000:
        raise ValueError(
            "values in (1,1000) are not allowed: use a fraction in (0,1] of the window to remove, "
            "or an absolute token count >= 1000 to keep"
        )
    return _whole(number, "an absolute bufferActivation")


def _reflection_buffer_activation(value: object) -> float:
    number = _require_number(value)
    if not 0 < number <= 1:
        raise ValueError("must be a fraction in (0,1] of reflection.observationTokens")
    return number


def _block_after(value: object) -> float | int | None:
    if value is None:
        return None
    number = _require_number(value)
    if number < 1:
        raise ValueError("must be a multiplier in [1,100) or an absolute token count >= 100")
    return number if number < 100 else _whole(number, "an absolute blockAfter")


def _previous_observer_tokens(value: object) -> int | Literal[False]:
    if value is False:
        return False
    if value is True:
        raise ValueError("must be a token budget >= 0 (0 = none) or false (all)")
    number = _require_number(value)
    if number < 0:
        raise ValueError("must be a token budget >= 0 (0 = none) or false (all)")
    return _whole(number, "previousObserverTokens")


def _provider_options(value: object) -> ProviderOptions:
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and isinstance(options, Mapping) for key, options in value.items()
    ):
        raise ValueError("must map provider names to option objects, e.g. {openai: {...}}")
    return {key: dict(options) for key, options in value.items()}


def _observation_idle_ttl(value: object) -> IdleTTL | Literal[False] | None:
    # Unlike the top-level option, False here means "do not inherit", so it is kept.
    return False if value is False else _idle_ttl(value)


ModelOption = Annotated[ModelSpec | None, BeforeValidator(_model_spec)]
IdleTTLOption = Annotated[IdleTTL | None, BeforeValidator(_idle_ttl)]
BlockAfterOption = Annotated[float | int | None, BeforeValidator(_block_after)]
ProviderOptionsOption = Annotated[ProviderOptions, BeforeValidator(_provider_options)]
Extractors = Annotated[tuple[Extractor, ...], AfterValidator(_unique_extractors)]


class ObservationConfig(_Section):
    model: ModelOption = None
    message_tokens: PositiveTokens = 30_000
    buffer_tokens: Annotated[BufferTokens, BeforeValidator(_buffer_tokens)] = 0.2
    buffer_activation: Annotated[float | int, BeforeValidator(_observation_buffer_activation)] = 0.8
    block_after: BlockAfterOption = DEFAULT_BLOCK_AFTER
    previous_observer_tokens: Annotated[int | Literal[False], BeforeValidator(_previous_observer_tokens)] = (
        2_000
    )
    max_tokens_per_batch: PositiveTokens = 10_000
    buffer_on_idle: StrictBool = False
    instruction: StrictStr | None = None
    thread_title: StrictBool = False
    extract: Extractors = ()
    observe_attachments: Annotated[AttachmentPolicy, BeforeValidator(_observe_attachments)] = True
    model_settings: ModelSettings = Field(default_factory=ModelSettings)
    provider_options: ProviderOptionsOption = Field(
        default_factory=lambda: {"google": {"thinkingConfig": {"thinkingBudget": 215}}}
    )
    continuation_hints: StrictBool = True
    # the Observer keeps the working-memory document (the top-level workingMemory section)
    manage_working_memory: StrictBool = False
    # Overrides of the top-level options (as in Mastra's standalone class); None inherits, False disables.
    activate_after_idle: Annotated[
        IdleTTL | Literal[False] | None, BeforeValidator(_observation_idle_ttl)
    ] = None
    activate_on_provider_change: StrictBool | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_block_after_without_buffering(cls, data: object) -> object:
        if isinstance(data, Mapping):
            data = _normalise_option_keys(data, drop_none=True)
            if data.get("bufferTokens") is False:
                data.setdefault("blockAfter", None)
        return data

    @model_validator(mode="after")
    def _fits_message_tokens(self) -> ObservationConfig:
        threshold = self.message_tokens
        problems: list[ConfigProblem] = []
        if self.buffer_tokens is False:
            if self.block_after is not None:
                problems.append(
                    ConfigProblem(
                        "blockAfter", self.block_after, _BLOCK_AFTER_RULE + " (bufferTokens is false)"
                    )
                )
        else:
            ratio = self.buffer_tokens < 1
            resolved = round_half_up(self.buffer_tokens * threshold) if ratio else self.buffer_tokens
            if resolved < 1:
                problems.append(
                    ConfigProblem("bufferTokens", self.buffer_tokens, "resolves to 0 tokens of messageTokens")
                )
            elif resolved >= threshold:
                problems.append(
                    ConfigProblem(
                        "bufferTokens",
                        self.buffer_tokens,
                        f"must resolve below observation.messageTokens ({threshold}); resolves to {resolved}",
                    )
                )
        if self.buffer_activation >= 1000 and self.buffer_activation >= threshold:
            problems.append(
                ConfigProblem(
                    "bufferActivation",
                    self.buffer_activation,
                    f"an absolute token count to keep must be below observation.messageTokens ({threshold})",
                )
            )
        if self.block_after is not None and 100 <= self.block_after <= threshold:
            problems.append(
                ConfigProblem(
                    "blockAfter",
                    self.block_after,
                    f"an absolute token count must be above observation.messageTokens ({threshold})",
                )
            )
        if problems:
            raise ConfigError.of(problems)
        return self


_BLOCK_AFTER_RULE = "only valid with async buffering"


# Mastra's default working-memory template (``memoryDefaultOptions.workingMemory.template``)
DEFAULT_WORKING_MEMORY_TEMPLATE = """\
# User Information
- **First Name**:
- **Last Name**:
- **Location**:
- **Occupation**:
- **Interests**:
- **Goals**:
- **Events**:
- **Facts**:
- **Projects**:
"""


class WorkingMemoryConfig(_Section):
    """Mastra's ``workingMemory`` Memory option: the document the Observer keeps when
    ``observation.manageWorkingMemory`` is on (docs/configuration.md, workingMemory)."""

    enabled: StrictBool = False
    # resolved to the record's scope when not given: the only scope om can keep (see _working_memory)
    scope: Scope | None = None
    template: StrictStr | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    agent_managed: StrictBool = False
    use_state_signals: StrictBool = True

    @field_validator("schema_", mode="before")
    @classmethod
    def _schema(cls, value: object) -> object:
        return _json_schema(value)

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("agent_managed")
    @classmethod
    def _not_agent_managed(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "om does not run the agent, so it has no working-memory tool to give it; the Observer "
                "keeps the document (observation.manageWorkingMemory)"
            )
        return value

    @field_validator("use_state_signals")
    @classmethod
    def _state_signals(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "om does not write the agent's system prompt: the document is always its own system "
                "message after the observations, where a change leaves the cached prefix alone"
            )
        return value

    @model_validator(mode="after")
    def _template_or_schema(self) -> WorkingMemoryConfig:
        if self.template is not None and self.schema_ is not None:
            raise ConfigError("schema", self.schema_, "give a template or a schema, not both")
        return self

    @property
    def document_template(self) -> str:
        """The Markdown template the Observer follows (unused with a schema)."""
        return self.template if self.template is not None else DEFAULT_WORKING_MEMORY_TEMPLATE


def _working_memory(data: dict[str, Any], observation: Mapping[str, Any]) -> list[ConfigProblem]:
    """Resolve ``workingMemory.enabled`` / ``scope`` from ``observation.manageWorkingMemory`` and the
    record's scope, and report the combinations om cannot keep."""
    raw = data.get("workingMemory", {})
    if not isinstance(raw, Mapping):
        return []  # left for the field validation to report
    section = dict(raw)
    managed = observation.get("manageWorkingMemory") is True
    problems: list[ConfigProblem] = []
    if managed:
        if section.get("enabled") is False:
            problems.append(
                ConfigProblem(
                    "workingMemory.enabled", False, "observation.manageWorkingMemory needs working memory on"
                )
            )
        section.setdefault("enabled", True)
    elif section.get("enabled") is True:
        problems.append(
            ConfigProblem(
                "workingMemory.enabled",
                True,
                "om keeps working memory through the Observer only: set observation.manageWorkingMemory: "
                "true (there is no agent tool to update it)",
            )
        )
    record_scope = data.get("scope", "thread")
    scope = section.get("scope")
    if scope in ("thread", "resource") and scope != record_scope:
        why = (
            "each thread is a record of its own, folded from its own stream, so a document shared by "
            "the resource's threads would be rewritten whole by several streams with no order between them"
            if scope == "resource"
            else "one record, and one Observer call, covers all the resource's threads: it keeps one document"
        )
        problems.append(ConfigProblem("workingMemory.scope", scope, f"must be {record_scope!r} here: {why}"))
    elif scope is None and section.get("enabled"):
        section["scope"] = record_scope
    if section:
        data["workingMemory"] = section
    return problems


class ReflectionConfig(_Section):
    model: ModelOption = None
    observation_tokens: PositiveTokens = 40_000
    buffer_activation: Annotated[float, BeforeValidator(_reflection_buffer_activation)] = 0.5
    block_after: BlockAfterOption = DEFAULT_BLOCK_AFTER
    instruction: StrictStr | None = None
    extract: Extractors = ()
    model_settings: ModelSettings = Field(default_factory=ModelSettings)
    provider_options: ProviderOptionsOption = Field(
        default_factory=lambda: {"google": {"thinkingConfig": {"thinkingBudget": 1024}}}
    )
    # Reflection never inherits the top-level idle/provider-change options (docs/configuration.md,
    # reflection).
    activate_after_idle: IdleTTLOption = None
    activate_on_provider_change: StrictBool = False
    continuation_hints: StrictBool = True

    @model_validator(mode="after")
    def _block_after_above_threshold(self) -> ReflectionConfig:
        if self.block_after is not None and 100 <= self.block_after <= self.observation_tokens:
            raise ConfigError(
                "blockAfter",
                self.block_after,
                "an absolute token count must be above reflection.observationTokens "
                f"({self.observation_tokens})",
            )
        return self


DEFAULT_EMBEDDER = "om-local/hashing"


def _embedder(value: object) -> str:
    if isinstance(value, str) and value != "default" and _MODEL_ID.match(value):
        return value
    raise ValueError('must be "provider/model", an embedding model')


class RetrievalConfig(_Section):
    vector: StrictBool = False
    scope: Scope = "resource"
    instructions: StrictStr | None = None
    # the embedding model of the vector index (an extension of Mastra's options, which take an embedder
    # object in the Memory constructor instead)
    embedder: Annotated[str, BeforeValidator(_embedder)] = DEFAULT_EMBEDDER


class ModelRetryConfig(_Section):
    """Bounded retries of transient model errors: exponential backoff from ``initialDelayMs``, capped at
    ``maxDelayMs``, each delay scaled by a random factor in ``[1 - jitter, 1 + jitter]``."""

    max_retries: Annotated[int, BeforeValidator(_not_bool), Field(ge=0)] = 4
    initial_delay_ms: Annotated[int, BeforeValidator(_not_bool), Field(ge=0)] = 500
    max_delay_ms: Annotated[int, BeforeValidator(_not_bool), Field(ge=0)] = 30_000
    jitter: Annotated[float, BeforeValidator(_not_bool), Field(ge=0, le=1)] = 0.2

    @model_validator(mode="after")
    def _delays_ordered(self) -> ModelRetryConfig:
        if self.max_delay_ms < self.initial_delay_ms:
            raise ConfigError(
                "maxDelayMs",
                self.max_delay_ms,
                f"must be >= modelRetry.initialDelayMs ({self.initial_delay_ms})",
            )
        return self


WEBHOOK_SECRET_MIN_LENGTH = 16


def _webhook_url(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("must be an http:// or https:// URL")
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return value


def _webhook_events(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"must be a non-empty list of: {', '.join(LIFECYCLE_EVENTS)}")
    unknown = [name for name in value if name not in LIFECYCLE_EVENTS]
    if unknown:
        raise ValueError(
            f"unknown event(s) {', '.join(map(repr, unknown))}; known: {', '.join(LIFECYCLE_EVENTS)}"
        )
    if len(set(value)) != len(value):
        raise ValueError("lists an event twice")
    return tuple(value)


class Webhook(_Section):
    """An endpoint the workers POST lifecycle events to, signed with ``secret``, or with the value of the
    environment variable ``secretEnv`` names, which keeps the secret out of the profile file
    (docs/operations.md)."""

    url: Annotated[str, BeforeValidator(_webhook_url)]
    events: Annotated[tuple[str, ...], BeforeValidator(_webhook_events)] = LIFECYCLE_EVENTS
    # kept out of reprs: a configuration printed in a log must not show it
    secret: Annotated[StrictStr | None, Field(min_length=WEBHOOK_SECRET_MIN_LENGTH, repr=False)] = None
    secret_env: Annotated[StrictStr | None, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = None

    @model_validator(mode="after")
    def _one_secret(self) -> Webhook:
        if (self.secret is None) == (self.secret_env is None):
            raise ValueError("needs exactly one of secret and secretEnv (the variable holding the secret)")
        return self


class WebhookSecretError(ValueError):
    """A webhook's ``secretEnv`` names a variable that is unset (or too short) where deliveries are signed."""

    def __init__(self, url: str, variable: str, rule: str) -> None:
        super().__init__(f"the webhook {url}: secretEnv {variable} {rule}")
        self.variable = variable


def webhook_secret(hook: Webhook, environ: Mapping[str, str]) -> str:
    """The key a delivery to ``hook`` is signed with: its ``secret``, or the value of ``secretEnv``."""
    if hook.secret is not None:
        return hook.secret
    assert hook.secret_env is not None
    value = environ.get(hook.secret_env)
    if value is None:
        raise WebhookSecretError(hook.url, hook.secret_env, "is not set in this process's environment")
    if len(value) < WEBHOOK_SECRET_MIN_LENGTH:
        raise WebhookSecretError(
            hook.url, hook.secret_env, f"must hold at least {WEBHOOK_SECRET_MIN_LENGTH} characters"
        )
    return value


def _unique_webhooks(webhooks: tuple[Webhook, ...]) -> tuple[Webhook, ...]:
    urls = [w.url for w in webhooks]
    twice = sorted({url for url in urls if urls.count(url) > 1})
    if twice:
        raise ValueError(f"lists the URL(s) {', '.join(twice)} twice (list every event under one entry)")
    return webhooks


def _retrieval(value: object) -> RetrievalConfig | None:
    if value is None or value is False:
        return None
    if isinstance(value, RetrievalConfig):
        return value
    if value is True:
        return RetrievalConfig()
    if isinstance(value, Mapping):
        return _validated(RetrievalConfig, value)
    raise ValueError("must be true, false or {vector, scope, instructions}")


def _tokenizer(value: object) -> str:
    if value == "tokenx" or (
        isinstance(value, str)
        and value.startswith("tiktoken:")
        and value.removeprefix("tiktoken:") in TIKTOKEN_ENCODINGS
    ):
        return value
    raise ValueError(
        f'must be "tokenx" or "tiktoken:<encoding>" with one of: {", ".join(sorted(TIKTOKEN_ENCODINGS))}'
    )


class MemoryConfig(_Section):
    """A validated, resolved memory configuration (immutable)."""

    # false: OM does nothing for the thread (no observation, reflection or activation)
    enabled: StrictBool = True
    model: ModelOption = None
    scope: Scope = "thread"
    observation: ObservationConfig = Field(default_factory=ObservationConfig)
    reflection: ReflectionConfig = Field(default_factory=ReflectionConfig)
    activate_after_idle: IdleTTLOption = None
    activate_on_provider_change: StrictBool = False
    share_token_budget: StrictBool = False
    temporal_markers: StrictBool = False
    retrieval: Annotated[RetrievalConfig | None, BeforeValidator(_retrieval)] = None
    obscure_thread_ids: StrictBool = False
    failure_policy: FailurePolicy = "abort"
    tokenizer: Annotated[str, BeforeValidator(_tokenizer)] = DEFAULT_TOKENIZER
    model_retry: ModelRetryConfig = Field(default_factory=ModelRetryConfig)
    working_memory: WorkingMemoryConfig = Field(default_factory=WorkingMemoryConfig)
    # set by the server profile only (a thread cannot override it): see docs/configuration.md
    webhooks: Annotated[tuple[Webhook, ...], AfterValidator(_unique_webhooks)] = ()

    @model_validator(mode="before")
    @classmethod
    def _resolve_dependent_defaults(cls, data: object) -> object:
        if not isinstance(data, Mapping):
            return data
        data = _normalise_option_keys(data, drop_none=True)
        # A section that is not an object is left for the field validation to report.
        sections = {
            name: dict(section)
            for name in ("observation", "reflection")
            if isinstance(section := data.get(name, {}), Mapping)
        }
        observation, reflection = sections.get("observation", {}), sections.get("reflection", {})
        problems: list[ConfigProblem] = []

        if "model" in data:
            problems.extend(
                ConfigProblem(
                    f"{name}.model", section["model"], "cannot be set together with the top-level model"
                )
                for name, section in sections.items()
                if "model" in section
            )

        resource_scope = data.get("scope") == "resource"
        if resource_scope:
            rule = (
                "async buffering is not available in resource scope (remove it, or set bufferTokens: false)"
            )
            if observation.get("bufferTokens", False) is not False:
                problems.append(ConfigProblem("observation.bufferTokens", observation["bufferTokens"], rule))
            problems.extend(
                ConfigProblem(f"{name}.bufferActivation", section["bufferActivation"], rule)
                for name, section in sections.items()
                if "bufferActivation" in section
            )
            observation["bufferTokens"] = False

        if observation.get("bufferTokens") is False:
            why = "resource scope" if resource_scope else "observation.bufferTokens is false"
            problems.extend(
                ConfigProblem(f"{name}.blockAfter", section["blockAfter"], f"{_BLOCK_AFTER_RULE} ({why})")
                for name, section in sections.items()
                if "blockAfter" in section
            )
            reflection["blockAfter"] = None
        problems.extend(_working_memory(data, observation))
        if problems:
            raise ConfigError.of(problems)

        data.update(sections)
        data.setdefault("obscureThreadIds", resource_scope)
        return data

    @model_validator(mode="after")
    def _share_token_budget_is_synchronous(self) -> MemoryConfig:
        if self.share_token_budget and self.buffering_enabled:
            raise ConfigError(
                "shareTokenBudget",
                True,
                "requires observation.bufferTokens: false (a shared budget does not support async buffering)",
            )
        return self

    @property
    def buffering_enabled(self) -> bool:
        """Async buffering of observations and reflections (both are turned off together)."""
        return self.observation.buffer_tokens is not False

    def to_json(self) -> dict[str, Any]:
        """The resolved configuration as camelCase JSON that ``parse_memory_config`` reads back unchanged."""
        document: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if self.scope == "resource":
            # Resolved but not settable in resource scope: writing them out would not parse back.
            del document["observation"]["bufferActivation"], document["reflection"]["bufferActivation"]
        return document


# ----------------------------------------------------------------------------------- key normalisation


def _option_names(models: Iterable[type[BaseModel]]) -> frozenset[str]:
    return frozenset(field.alias or name for model in models for name, field in model.model_fields.items())


_OPTION_NAMES = _option_names(
    (MemoryConfig, ObservationConfig, ReflectionConfig, ModelSettings, Extractor, RetrievalConfig,
     ModelRetryConfig, ModelByInputTokens, ModelWithRetries, Webhook, WorkingMemoryConfig)
)  # fmt: skip


def _canonical_key(key: object) -> object:
    """The camelCase option name for a snake_case spelling; keys that name no option are left as written
    so an error can quote them."""
    if isinstance(key, str) and "_" in key:
        camel = to_camel(key)
        if camel in _OPTION_NAMES:
            return camel
    return key


def _normalise_option_keys(raw: Mapping[Any, Any], *, drop_none: bool, path: str = "") -> dict[Any, Any]:
    normalised: dict[Any, Any] = {}
    spelled: dict[Any, object] = {}
    problems: list[ConfigProblem] = []
    for key, value in raw.items():
        canonical = _canonical_key(key)
        if canonical in normalised or canonical in spelled:
            problems.append(
                ConfigProblem(
                    _join_path(path, str(canonical)),
                    value,
                    f"given twice (as {spelled[canonical]!r} and {key!r})",
                )
            )
            continue
        spelled[canonical] = key
        if value is None and drop_none:
            continue
        if canonical not in _FREE_FORM_KEYS:
            value = _normalise_value(value, drop_none=drop_none, path=_join_path(path, str(canonical)))
        normalised[canonical] = value
    if problems:
        raise ConfigError.of(problems)
    return normalised


def _normalise_value(value: object, *, drop_none: bool, path: str) -> object:
    if isinstance(value, Mapping):
        return _normalise_option_keys(value, drop_none=drop_none, path=path)
    if isinstance(value, list | tuple):
        return [
            _normalise_value(item, drop_none=drop_none, path=_join_path(path, f"[{index}]"))
            for index, item in enumerate(value)
        ]
    return value


# ----------------------------------------------------------------------------------------- public API


_WRAPPER_KEYS = ("observationalMemory", "observational_memory")


def unwrap_observational_memory(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """Mastra's Memory option written as is, ``{observationalMemory: true | false | {...}}``: ``true`` is
    every default, ``false`` is ``{enabled: false}``, an object is the options. Anything else is returned
    unchanged."""
    keys = [key for key in _WRAPPER_KEYS if key in raw]
    if not keys:
        return raw
    if len(raw) > 1:
        others = sorted(str(key) for key in raw if key not in _WRAPPER_KEYS) or keys
        raise ConfigError(
            keys[0],
            raw[keys[0]],
            "Mastra's observationalMemory wrapper must be the only key of its object; move "
            f"{', '.join(others)} inside it",
        )
    value = raw[keys[0]]
    if value is True:
        return {}
    if value is False:
        return {"enabled": False}
    if isinstance(value, Mapping):
        return value
    raise ConfigError(keys[0], value, "must be true, false or an object of options")


def parse_memory_config(raw: Mapping[str, Any] | None) -> MemoryConfig:
    """Validate a raw configuration (camelCase and/or snake_case keys). ``None`` gives the defaults.

    Raises ``ConfigError`` listing every problem, each naming the option, the value and the rule.
    """
    if raw is None:
        return MemoryConfig()
    if not isinstance(raw, Mapping):
        raise ConfigError("", raw, "a memory configuration must be an object of options")
    raw = unwrap_observational_memory(raw)
    try:
        return MemoryConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError.from_validation(error, MemoryConfig) from None


def merge_config_layers(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Deep-merge raw configuration layers (server profile, then per-thread overrides); later layers win.

    Keys are normalised to camelCase first, so layers may mix spellings. ``None`` as a value removes the
    option set by earlier layers (back to its default). Model specs replace each other whole, and a later
    layer choosing a role model (``observation.model``/``reflection.model``) drops an earlier top-level
    ``model`` and vice versa, since the two cannot be combined. The result still needs
    ``parse_memory_config``.
    """
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer is None:
            continue
        if not isinstance(layer, Mapping):
            raise ConfigError("", layer, "a configuration layer must be an object of options")
        override = _normalise_option_keys(unwrap_observational_memory(layer), drop_none=False)
        _drop_superseded_models(merged, override)
        merged = _deep_merge(merged, override)
    return merged


def _drop_superseded_models(merged: dict[str, Any], override: Mapping[str, Any]) -> None:
    sections = [merged.get(name) for name in ("observation", "reflection")]
    if "model" in override:
        for section in sections:
            if isinstance(section, dict):
                section.pop("model", None)
    elif any(
        isinstance(override.get(name), Mapping) and "model" in override[name]
        for name in ("observation", "reflection")
    ):
        merged.pop("model", None)


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(base)
    for key, value in override.items():
        if value is None:
            result.pop(key, None)
        elif key != "model" and isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = _deep_merge(result[key], value)
        else:
            result[key] = value
    return result


def require_thread_id(config: MemoryConfig, thread_id: str | None) -> None:
    """Thread scope keys the record by thread: using it without a thread id is a configuration error."""
    if config.scope == "thread" and not thread_id:
        raise ConfigError("scope", config.scope, "thread scope requires a thread id")
