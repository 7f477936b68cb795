"""Request bodies as JSON, bounded in depth, parsed once for every route.

A body nested thousands of levels deep would otherwise reach code that walks it recursively (the NUL check,
token counting, the event encoder, whose limit is 254 levels) and end as a 500. Every route's body is parsed
here instead: the routes' own parse (FastAPI's, through ``Request.json``) finds it already done.
"""

from __future__ import annotations

import contextlib
import email.message
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from om_api.errors import ApiError

# Far deeper than any message, part or tool call nests (a message's tool arguments start at level 6), and
# well inside what every walker of a stored message can follow.
MAX_JSON_DEPTH = 64


class BodyTooDeepError(ApiError):
    def __init__(self) -> None:
        super().__init__(
            400,
            "invalid_body",
            f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep",
            {"max_depth": MAX_JSON_DEPTH},
        )


def nesting_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests arrays and objects deeper than ``limit`` (iteratively: the very bodies it
    refuses would overflow a recursive walk)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def contains_nul(value: Any) -> bool:
    """Whether any string of ``value`` (keys included) holds the NUL character, which no database text type
    stores."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


class NotJsonConstantError(ApiError):
    def __init__(self, constant: str) -> None:
        super().__init__(
            400,
            "invalid_body",
            f"the request body holds {constant}, which is not a JSON value (numbers must be finite)",
            {"constant": constant},
        )


def _refuse_constant(constant: str) -> Any:
    raise NotJsonConstantError(constant)


def load_json_body(raw: bytes) -> Any:
    """``raw`` parsed as JSON; ``ValueError`` when it is not JSON (or not UTF-8), ``BodyTooDeepError`` when
    it nests too deep (including past the parser's own recursion limit), ``NotJsonConstantError`` for
    ``NaN`` and ``Infinity``, which Python's parser takes but JSON does not have and the store cannot hold."""
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise BodyTooDeepError() from None
    if nesting_exceeds(body):
        raise BodyTooDeepError()
    return body


def _declares_json(request: Request) -> bool:
    content_type = request.headers.get("content-type")
    if not content_type or content_type == "application/json":
        # what nearly every client sends: no need to parse the header's parameters
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


class JsonBodyRoute(APIRoute):
    """A route whose JSON body is parsed by ``load_json_body`` before FastAPI reads it. A body that is not
    JSON is left to FastAPI, which reports where it breaks (``malformed_json``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            if request.method in ("POST", "PUT", "PATCH") and _declares_json(request):
                raw = await request.body()
                if raw:
                    # a body that is not JSON is FastAPI's to report; the cache Request.json() reads is
                    # what FastAPI's own parse finds
                    with contextlib.suppress(ValueError):
                        request._json = load_json_body(raw)
            return await handler(request)

        return route
