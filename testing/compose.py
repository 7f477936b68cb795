"""A Compose file as ``docker compose config`` renders it, for machines without Docker.

Follows the Compose Specification's interpolation (docs.docker.com, "Interpolation"): the YAML is parsed
first (anchors and ``<<`` merge keys resolved), then every string value, never a key, is interpolated
with the environment, the project directory's ``.env`` under the process environment:

- ``$VAR`` and ``${VAR}``: the value; unset, an empty string and a warning;
- ``${VAR:-default}`` / ``${VAR-default}``: ``default`` when unset or empty / only when unset;
- ``${VAR:?error}`` / ``${VAR?error}``: refuse the file, with ``error``, when unset or empty / unset;
- ``${VAR:+alternative}`` / ``${VAR+alternative}``: ``alternative`` when set and non-empty / when set;
- operands are interpolated themselves (``${A:-${B:-x}}``); ``$$`` is a literal ``$``; a ``$`` that starts
  no name and no ``${`` is kept as it is; anything else inside ``${...}`` is an invalid format.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_OPERATORS = (":-", ":?", ":+", "-", "?", "+")


class ComposeError(ValueError):
    """What ``docker compose`` refuses the file with."""


@dataclass
class Rendered:
    """The interpolated model, and the variables it used unset with no default (compose warns of each)."""

    model: dict[str, Any]
    unset: list[str] = field(default_factory=list)

    def service(self, name: str) -> dict[str, Any]:
        service: dict[str, Any] = self.model["services"][name]
        return service

    def environment(self, name: str) -> dict[str, str]:
        """A service's environment as its container gets it (a list of ``KEY=VALUE`` or a mapping)."""
        raw = self.service(name).get("environment") or {}
        if isinstance(raw, list):
            pairs = (entry.partition("=") for entry in raw)
            return {key: value for key, _, value in pairs}
        return {str(key): "" if value is None else str(value) for key, value in raw.items()}


def dotenv(path: Path) -> dict[str, str]:
    """A ``.env`` file's variables (``KEY=VALUE`` lines, ``#`` comments, optional quotes)."""
    found: dict[str, str] = {}
    if not path.is_file():
        return found
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        found[key.strip()] = value
    return found


def render(path: Path, environ: Mapping[str, str]) -> Rendered:
    """The Compose file at ``path`` interpolated with ``environ`` over the project's ``.env``."""
    variables = {**dotenv(path.parent / ".env"), **environ}
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, dict):
        raise ComposeError(f"{path}: a Compose file is a mapping")
    unset: list[str] = []
    return Rendered(_walk(document, variables, unset, "$"), unset)


def _walk(node: Any, variables: Mapping[str, str], unset: list[str], where: str) -> Any:
    if isinstance(node, dict):
        return {key: _walk(value, variables, unset, f"{where}.{key}") for key, value in node.items()}
    if isinstance(node, list):
        return [_walk(value, variables, unset, f"{where}[{i}]") for i, value in enumerate(node)]
    if isinstance(node, str):
        return interpolate(node, variables, unset, where)
    return node


def interpolate(text: str, variables: Mapping[str, str], unset: list[str], where: str = "") -> str:
    """``text`` with every ``$`` expression replaced (see the module's summary)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$":
            out.append(char)
            i += 1
            continue
        following = text[i + 1 : i + 2]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "{":
            end = _closing_brace(text, i + 2, where)
            out.append(_braced(text[i + 2 : end], variables, unset, where))
            i = end + 1
        elif match := _NAME.match(text, i + 1):
            out.append(_value(match.group(), variables, unset))
            i = match.end()
        else:
            out.append("$")
            i += 1
    return "".join(out)


def _closing_brace(text: str, start: int, where: str) -> int:
    depth = 1
    i = start
    while i < len(text):
        if text.startswith("$$", i):
            i += 2
            continue
        if text.startswith("${", i):
            depth += 1
            i += 2
            continue
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ComposeError(f"invalid interpolation format for {where}: {text!r} (no closing brace)")


def _value(name: str, variables: Mapping[str, str], unset: list[str]) -> str:
    if name not in variables:
        unset.append(name)
        return ""
    return variables[name]


def _braced(inner: str, variables: Mapping[str, str], unset: list[str], where: str) -> str:
    match = _NAME.match(inner)
    if match is None:
        raise ComposeError(f"invalid interpolation format for {where}: '${{{inner}}}'")
    name, rest = match.group(), inner[match.end() :]
    if not rest:
        return _value(name, variables, unset)
    operator = next((op for op in _OPERATORS if rest.startswith(op)), None)
    if operator is None:
        raise ComposeError(f"invalid interpolation format for {where}: '${{{inner}}}'")
    operand = rest[len(operator) :]
    is_set = name in variables
    present = is_set and variables[name] != ""
    # ":" makes an empty value count as unset
    usable = present if operator.startswith(":") else is_set
    kind = operator[-1]
    if kind == "-":
        return variables[name] if usable else interpolate(operand, variables, unset, where)
    if kind == "?":
        if usable:
            return variables[name]
        message = interpolate(operand, variables, unset, where)
        raise ComposeError(f"required variable {name} is missing a value: {message}")
    return interpolate(operand, variables, unset, where) if usable else ""
