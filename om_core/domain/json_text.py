"""Sorted, compact JSON text as the standard library writes it, at orjson's speed where the two agree.

The fold and every load of a record write a message's canonical text (the window's ``body``), the load
once per message of the window; the standard encoder took a fifth of a load. orjson writes the same text
in a fraction of the time except in two cases, which go to the standard library: floats between 1e-9 and
1e-4, which orjson writes as ``0.00001`` or ``1.5e-7`` where the standard library writes ``1e-05`` and
``1.5e-07``; and what orjson refuses (integers beyond 64 bits, keys that are not strings). The float check
looks at the text for the shape such a number takes; text that merely resembles it (inside a string) takes
the slower path to the same result.

(Reading is left to the standard library: for documents that are mostly text orjson parses them barely
faster, and telling whether a document holds an integer beyond 64 bits, which orjson reads as a float,
cost more than the parse.)
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

# a single-digit negative exponent (``1.5e-7``) or a fraction below 1e-4 written out (``0.00001``)
_FLOAT_WRITTEN_OTHERWISE = re.compile(rb"e-\d(?!\d)|0\.0000")
_standard_sorted = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode


def sorted_json(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)``, exactly."""
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return _standard_sorted(value)
    # the substring tests are a fraction of the pattern's cost, and most texts have neither
    if (b"e-" in text or b"0.0000" in text) and _FLOAT_WRITTEN_OTHERWISE.search(text):
        return _standard_sorted(value)
    return text.decode()
