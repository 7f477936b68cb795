"""Pre-encoded JSON answers for the endpoints every agent turn calls.

FastAPI validates a handler's return value against its ``response_model`` and then serialises it: for a
context of a few hundred messages that took longer than building the context. The turn's endpoints build
their answers to the model's shape themselves (tests check them against it, and schemathesis against
``/openapi.json``) and hand back bytes; the model still documents the answer in the OpenAPI schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi import Response


def json_response(
    payload: dict[str, Any], *, embedded: Mapping[str, Sequence[str]] | None = None
) -> Response:
    """``payload`` as JSON; each ``embedded`` key holds a list of JSON texts (stored messages) placed
    into the answer as they are, without parsing them."""
    raw = embedded or {}
    try:
        body = orjson.dumps({**payload, **{k: [orjson.Fragment(t) for t in v] for k, v in raw.items()}})
    except TypeError:
        # orjson refuses what JSON does not bound, such as an integer beyond 64 bits in a thread's
        # metadata; the standard encoder writes it as it came
        whole = {**payload, **{k: [json.loads(t) for t in v] for k, v in raw.items()}}
        body = json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(content=body, media_type="application/json")
