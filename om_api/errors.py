"""The error model of the HTTP API: every error is ``{"error": {"code", "message", "details"}}``.

Domain and store exceptions are translated here, in one place, so routes stay thin and bad input can never
surface as a 500: only a bug does (and then the body still follows the model, without internals, and the
connection stays usable).
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from om_core.application.context import ObservationFailedError
from om_core.application.history import GenerationNotFoundError, UnknownEventTypeError
from om_core.application.ports import (
    MessageConflictError,
    ModelConfigurationError,
    ModelError,
    StoreUnavailableError,
)
from om_core.application.profile_admin import ProfileConflictError
from om_core.application.profiles import ProfileNameError, ProfileNotFoundError, UnknownProfileError
from om_core.application.recall import (
    CharOffsetOutOfRangeError,
    CursorAmbiguousError,
    CursorIsRangeError,
    CursorNotFoundError,
    CursorRequiredError,
    PartIndexOutOfRangeError,
    QueryRequiredError,
    RecallError,
    ThreadScopeError,
)
from om_core.application.streams import ProfileMismatchError, RecordNotFoundError, ResourceRequiredError
from om_core.domain.config import ConfigError
from om_core.domain.message_input import MessageValidationError

log = logging.getLogger("om_api")

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    503: "unavailable",
}


# what the recall tool refuses, as the status and code it answers with (the error gives message and details)
_RECALL_ERRORS: dict[type[RecallError], tuple[int, str]] = {
    CursorIsRangeError: (400, "cursor_is_range"),
    CursorAmbiguousError: (400, "cursor_ambiguous"),
    ThreadScopeError: (400, "thread_scope"),
    CursorNotFoundError: (404, "cursor_not_found"),
    CursorRequiredError: (422, "cursor_required"),
    PartIndexOutOfRangeError: (422, "part_index_out_of_range"),
    CharOffsetOutOfRangeError: (422, "char_offset_out_of_range"),
    QueryRequiredError: (422, "query_required"),
}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def _allowed_methods(app: FastAPI, request: Request) -> set[str]:
    from fastapi.routing import iter_route_contexts
    from starlette.routing import Match

    allowed: set[str] = set()
    # an included router is one entry of app.router.routes; its routes are reached through their contexts
    for route in iter_route_contexts(app.router.routes):
        match, _ = route.matches({**request.scope, "method": "__none__"})
        methods = getattr(route, "methods", None)
        if match != Match.NONE and methods:
            allowed.update(methods)
    allowed.discard("HEAD")
    return allowed


def _undeclared_body(request: Request) -> bool:
    """A body whose content-type does not say JSON: FastAPI leaves it unparsed (a browser can send such a
    body to a loopback server without a CORS preflight), so it cannot match the schema."""
    sized = request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return sized and media_type != "application/json" and not media_type.endswith("+json")


def _store_unavailable(error: Exception) -> JSONResponse:
    log.warning("store unavailable: %s", error)
    return error_response(
        503, "store_unavailable", "the database is unavailable; retry", {}, {"Retry-After": "2"}
    )


def _model_unavailable(error: Exception) -> JSONResponse:
    log.warning("model unavailable: %s", error)
    return error_response(
        503, "model_unavailable", f"a model this request needs failed: {error}", {}, {"Retry-After": "5"}
    )


def _lost_connection(error: sa.exc.DBAPIError) -> bool:
    return isinstance(error, sa.exc.OperationalError | sa.exc.InterfaceError) or error.connection_invalidated


class UnexpectedErrors:
    """Answers an exception nothing else handled with the error model's 500, and returns normally.

    Starlette's last-resort handler re-raises after answering, and uvicorn then closes the connection, so
    a client's next request on that keep-alive connection was reset. Innermost of the middlewares, so the
    metrics still count the 500.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method", ""), scope.get("path", ""))
            if started:
                # part of an answer is out: only closing the connection can tell the client it is cut
                raise
            response = error_response(500, "internal_error", "internal error; it has been logged")
            await response(scope, receive, send)


def install(app: FastAPI) -> None:
    """The exception handlers, and the middleware answering what they do not handle; call it before any
    other middleware is added."""
    app.add_middleware(UnexpectedErrors)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        return error_response(error.status, error.code, error.message, error.details, error.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "type": str(e.get("type", "")),
                "msg": str(e.get("msg", "")),
            }
            for e in error.errors()
        ]
        if any(p["type"] == "json_invalid" for p in problems):
            return error_response(
                400, "malformed_json", "the request body is not valid JSON", {"errors": problems}
            )
        if any(p["loc"][:1] == ["body"] for p in problems) and _undeclared_body(request):
            return error_response(
                415,
                "unsupported_media_type",
                "the request body must be JSON, sent with content-type: application/json",
                {"content_type": request.headers.get("content-type")},
            )
        path_problem = next((p for p in problems if p["loc"][:1] == ["path"]), None)
        if path_problem is not None:
            name = path_problem["loc"][1] if len(path_problem["loc"]) > 1 else "path"
            return error_response(
                422, f"invalid_{name}", f"{name}: {path_problem['msg']}", {"errors": problems}
            )
        return error_response(
            422, "validation_error", "the request does not match the schema", {"errors": problems}
        )

    @app.exception_handler(MessageValidationError)
    async def _message(_: Request, error: MessageValidationError) -> JSONResponse:
        return error_response(
            422, "invalid_message", str(error), {"path": error.path, "reason": error.reason}
        )

    @app.exception_handler(ConfigError)
    async def _config(_: Request, error: ConfigError) -> JSONResponse:
        problems = [{"option": p.option, "value": _jsonable(p.value), "rule": p.rule} for p in error.problems]
        return error_response(422, "invalid_config", str(error), {"problems": problems})

    @app.exception_handler(MessageConflictError)
    async def _conflict(_: Request, error: MessageConflictError) -> JSONResponse:
        return error_response(
            409,
            "message_conflict",
            f"message id {error.message_id!r} already exists with different content",
            {"message_id": error.message_id},
        )

    @app.exception_handler(ResourceRequiredError)
    async def _resource_required(_: Request, error: ResourceRequiredError) -> JSONResponse:
        return error_response(422, "resource_required", str(error), {"thread_id": error.thread_id})

    @app.exception_handler(ProfileNotFoundError)
    async def _profile_missing(_: Request, error: ProfileNotFoundError) -> JSONResponse:
        if isinstance(error, UnknownProfileError):
            return error_response(422, "unknown_profile", str(error), {"profile": error.name})
        return error_response(404, "profile_not_found", str(error), {"profile": error.name})

    @app.exception_handler(ProfileNameError)
    async def _profile_name(_: Request, error: ProfileNameError) -> JSONResponse:
        return error_response(422, "invalid_profile_name", str(error), {"profile": error.name})

    @app.exception_handler(ProfileConflictError)
    async def _profile_conflict(_: Request, error: ProfileConflictError) -> JSONResponse:
        return error_response(
            409, "profile_conflict", str(error), {"profile": error.name, "threads": error.threads}
        )

    @app.exception_handler(ProfileMismatchError)
    async def _profile_mismatch(_: Request, error: ProfileMismatchError) -> JSONResponse:
        details = {
            "thread_id": error.thread_id,
            "profile": error.current or "default",
            "requested": error.requested,
        }
        return error_response(409, "profile_mismatch", str(error), details)

    @app.exception_handler(RecordNotFoundError)
    async def _missing(_: Request, error: RecordNotFoundError) -> JSONResponse:
        # the same answer whether the thread never existed, was erased, or belongs to another tenant
        thread = error.stream_id.split("/", 2)[-1]
        return error_response(404, "thread_not_found", f"no thread {thread!r}", {"thread_id": thread})

    @app.exception_handler(RecallError)
    async def _recall(_: Request, error: RecallError) -> JSONResponse:
        status, code = _RECALL_ERRORS[type(error)]
        return error_response(status, code, str(error), error.details)

    @app.exception_handler(UnknownEventTypeError)
    async def _unknown_event_type(_: Request, error: UnknownEventTypeError) -> JSONResponse:
        details = {"unknown": error.unknown, "known": error.known}
        return error_response(422, "unknown_event_type", str(error), details)

    @app.exception_handler(GenerationNotFoundError)
    async def _generation_not_found(_: Request, error: GenerationNotFoundError) -> JSONResponse:
        return error_response(404, "generation_not_found", str(error))

    @app.exception_handler(ObservationFailedError)
    async def _observation_failed(_: Request, error: ObservationFailedError) -> JSONResponse:
        return error_response(
            503,
            "observation_failed",
            str(error),
            {"pending_tokens": error.pending_tokens, "limit": error.limit},
            {"Retry-After": "5"},
        )

    # a model the request itself needs (recall's search embeds its query); model work follows failurePolicy
    @app.exception_handler(ModelError)
    async def _model(_: Request, error: ModelError) -> JSONResponse:
        return _model_unavailable(error)

    @app.exception_handler(ModelConfigurationError)
    async def _model_configuration(_: Request, error: ModelConfigurationError) -> JSONResponse:
        return _model_unavailable(error)

    @app.exception_handler(StoreUnavailableError)
    async def _store(_: Request, error: StoreUnavailableError) -> JSONResponse:
        return _store_unavailable(error)

    # what reads the database outside the store (key lookup, list and recall queries) sees the driver's errors
    @app.exception_handler(sa.exc.DBAPIError)
    async def _database(_: Request, error: sa.exc.DBAPIError) -> JSONResponse:
        if not _lost_connection(error):
            raise error
        return _store_unavailable(error)

    @app.exception_handler(sa.exc.TimeoutError)
    async def _pool_exhausted(_: Request, error: sa.exc.TimeoutError) -> JSONResponse:
        return _store_unavailable(error)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(error.status_code, "error")
        headers = dict(error.headers or {})
        if error.status_code == 405:
            # Starlette names only the first matching route's methods; list every route's for this path
            headers["Allow"] = ", ".join(sorted(_allowed_methods(app, request)))
        return error_response(error.status_code, code, str(error.detail), {}, headers)
