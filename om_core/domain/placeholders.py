"""Values an operator copied from an example without replacing them (``CHANGE-ME``, ``<your key>``).

A placeholder in a credential passes every "is it set?" check and fails only at the first call that uses it,
so a process refuses it at start as it refuses a missing value.
"""

from __future__ import annotations

import re

# the whole value is the placeholder: a real key or password never reads as one of these
_PLACEHOLDER = re.compile(
    r"(change|replace|fill|set)[-_ ]?(me|this|it)(?:[-_ ]?please)?|<[^<>]*>|x{3,}|\*{3,}|\.{3}|todo|"
    r"placeholder|your[-_ ]?[a-z_ -]*(key|password|secret|token)[-_ ]?(here)?",
    re.IGNORECASE,
)


def is_placeholder(value: str) -> bool:
    """Whether ``value`` is an example's stand-in rather than a real credential."""
    return _PLACEHOLDER.fullmatch(value.strip()) is not None
