"""Python client for the om HTTP API (docs/api.md), sync (``OMClient``) and async (``AsyncOMClient``).

    with OMClient("http://127.0.0.1:8080", api_key="om_…") as om:
        window = om.turn("thread-1", [{"role": "user", "content": "hi"}], model="openai/gpt-5-mini",
                         format="openai")
        reply = ...  # the app's own model call, with window["messages"]
        om.append_in_background("thread-1", [reply])  # the next turn() waits for it

``turn`` appends the user's message and returns the context in one request; ``append`` and ``context``
do the two halves. Every route of the API has its method, in both clients; ``openai()`` is the ``openai``
package's own client pointed at om's OpenAI-compatible proxy, with the thread in its headers.

Errors come back as ``OMError`` carrying the API's ``code``, ``message`` and ``details``. ``stream`` yields
``StreamPart``s (the ``data-om-*`` part and the SSE id it arrived with) and resumes after a dropped
connection from the last id it saw, so a consumer sees each part once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import quote

import httpx

if TYPE_CHECKING:
    import openai

JSON = dict[str, Any]
Format = Literal["om", "openai"]
CacheRetention = Literal["in_memory", "24h"]
# one call of the API: method, path, and httpx's request arguments
Call = tuple[str, str, dict[str, Any]]


class OMError(Exception):
    """An error answer. ``retry_after`` (seconds) is set when the server says when to try again: a rate
    limit (429) or a store or observation that is unavailable for now (503)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = dict(details or {})
        self.retry_after = retry_after


@dataclass(frozen=True)
class StreamPart:
    """A ``data-om-*`` part; ``position`` is the SSE id (global position) when the part closed an event."""

    type: str
    id: str
    data: JSON
    position: int | None


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    retry_after = _retry_after(response.headers.get("retry-after"))
    try:
        error = response.json()["error"]
        code, message, details = str(error["code"]), str(error["message"]), error.get("details")
    except (ValueError, KeyError, TypeError):
        raise OMError(response.status_code, "http_error", response.text[:500], None, retry_after) from None
    raise OMError(response.status_code, code, message, details, retry_after)


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the server only sends seconds


def _t(thread_id: str) -> str:
    return "/v1/threads/" + quote(thread_id, safe="")


def _params(**values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        out[key] = str(value).lower() if isinstance(value, bool) else value
    return out


class SSEParser:
    """Incremental text/event-stream parser: feed lines, get (data, id) events; tracks the last id."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> tuple[str, str | None] | None:
        if line == "":
            if not self._data:
                return None
            data, self._data = "\n".join(self._data), []
            return data, self.last_id
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "id" and "\0" not in value:
            self.last_id = value
        return None


def _part(data: str, event_id: str | None, closes: bool) -> StreamPart:
    raw = json.loads(data)
    position = int(event_id) if closes and event_id is not None and event_id.isdigit() else None
    return StreamPart(
        type=raw["type"], id=str(raw.get("id", "")), data=raw.get("data", {}), position=position
    )


class _Routes:
    """Every call of the API as (method, path, request arguments): both clients send exactly these, only
    the transport differs."""

    @staticmethod
    def headers(api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    @staticmethod
    def put_thread(
        thread_id: str,
        resource_id: str | None,
        title: str | None,
        metadata: Mapping[str, Any] | None,
        config: Mapping[str, Any] | None,
        profile: str | None,
    ) -> Call:
        body = _params(
            resource_id=resource_id, title=title, metadata=metadata, config=config, profile=profile
        )
        return "PUT", _t(thread_id), {"json": body}

    @staticmethod
    def thread(
        method: str, thread_id: str, suffix: str = "", params: Mapping[str, Any] | None = None
    ) -> Call:
        # a mapping, not keywords: recall's own parameters include thread_id
        return method, _t(thread_id) + suffix, {"params": _params(**(params or {}))}

    @staticmethod
    def threads(limit: int | None, offset: int | None, resource_id: str | None = None) -> Call:
        path = (
            "/v1/threads" if resource_id is None else f"/v1/resources/{quote(resource_id, safe='')}/threads"
        )
        return "GET", path, {"params": _params(limit=limit, offset=offset)}

    @staticmethod
    def messages(
        thread_id: str,
        suffix: str,
        messages: Sequence[Mapping[str, Any]],
        resource_id: str | None,
        profile: str | None,
        params: JSON,
    ) -> Call:
        body: JSON = {"messages": list(messages), **_params(resource_id=resource_id, profile=profile)}
        return "POST", _t(thread_id) + suffix, {"json": body, "params": params}

    @staticmethod
    def context_params(
        model: str | None,
        format: Format,
        wait: bool,
        prompt_cache_retention: CacheRetention | None,
        at_version: int | None = None,
    ) -> JSON:
        return _params(
            model=model,
            format=format,
            at_version=at_version,
            wait=None if wait else False,
            prompt_cache_retention=prompt_cache_retention,
        )

    @staticmethod
    def cycle(thread_id: str, kind: Literal["observe", "reflect"], wait: bool) -> Call:
        return "POST", f"{_t(thread_id)}/{kind}", {"json": {"wait": wait}}

    @staticmethod
    def events(thread_id: str, after: int, limit: int, types: Sequence[str] | None) -> Call:
        params = _params(after=after, limit=limit, types=",".join(types) if types else None)
        return "GET", f"{_t(thread_id)}/events", {"params": params}

    @staticmethod
    def profile(method: str, name: str, options: Mapping[str, Any] | None = None) -> Call:
        path = "/v1/profiles/" + quote(name, safe="")
        return method, path, {} if options is None else {"json": dict(options)}

    @staticmethod
    def proxy_headers(thread_id: str | None, resource_id: str | None, profile: str | None) -> dict[str, str]:
        named = {"X-OM-Thread-Id": thread_id, "X-OM-Resource-Id": resource_id, "X-OM-Profile": profile}
        return {name: value for name, value in named.items() if value is not None}


def _openai_arguments(base_url: str, api_key: str | None, headers: dict[str, str], options: JSON) -> JSON:
    """``openai.OpenAI``'s arguments: om's ``/v1``, the om key, the thread's headers and the caller's."""
    given = options.pop("default_headers", None) or {}
    # the proxy authenticates the om key as every route does; OpenAI's client insists on some key
    return {
        "base_url": base_url.rstrip("/") + "/v1",
        "api_key": api_key or "om-auth-disabled",
        "default_headers": {**headers, **given},
        **options,
    }


_OpenAIClient = TypeVar("_OpenAIClient")


def _keyed(client: _OpenAIClient) -> _OpenAIClient:
    """The ``openai`` package's client made to send an ``Idempotency-Key`` with every request, the same
    key on each of its own retries (the package generates one per request, and sends it when told the
    header's name): a retry after a lost answer gets the stored reply, and the same words sent again by
    the app are a new message (docs/api.md, Retries and regeneration)."""
    if hasattr(client, "_idempotency_header"):
        client._idempotency_header = "Idempotency-Key"
    return client


class OMClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._base_url, self._api_key = base_url, api_key
        self._http = httpx.Client(
            base_url=base_url, headers=_Routes.headers(api_key), timeout=timeout, transport=transport
        )
        # appends sent without waiting, one at a time so the thread's order is the order they were sent
        self._background: ThreadPoolExecutor | None = None
        self._pending: list[Future[JSON]] = []

    def __enter__(self) -> OMClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._background is not None:
                self._background.shutdown()
            self._http.close()

    def append_in_background(
        self,
        thread_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        resource_id: str | None = None,
        profile: str | None = None,
    ) -> Future[JSON]:
        """Send an append without waiting for its answer: the reply after the model call, off the agent's
        critical path. Appends sent this way go one at a time, in order; ``turn`` and ``flush`` wait for
        them, so the next turn's message always lands after the reply."""
        if self._background is None:
            self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="om-append")
        future = self._background.submit(
            self.append, thread_id, messages, resource_id=resource_id, profile=profile
        )
        self._pending.append(future)
        return future

    def flush(self) -> None:
        """Wait for every append sent with ``append_in_background``; raises the first one's error."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def _call(self, method: str, path: str, arguments: dict[str, Any]) -> Any:
        response = self._http.request(method, path, **arguments)
        _raise_for(response)
        return None if response.status_code == 204 else response.json()

    # --- threads and messages ---

    def put_thread(
        self,
        thread_id: str,
        *,
        resource_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        profile: str | None = None,
    ) -> JSON:
        """Create or update a thread; ``profile``: the named profile it runs under."""
        result: JSON = self._call(
            *_Routes.put_thread(thread_id, resource_id, title, metadata, config, profile)
        )
        return result

    def get_thread(self, thread_id: str) -> JSON:
        result: JSON = self._call(*_Routes.thread("GET", thread_id))
        return result

    def list_threads(self, *, limit: int | None = None, offset: int | None = None) -> list[JSON]:
        """The tenant's threads, most recently updated first (``limit`` per page, from ``offset``)."""
        result: list[JSON] = self._call(*_Routes.threads(limit, offset))["threads"]
        return result

    def resource_threads(
        self, resource_id: str, *, limit: int | None = None, offset: int | None = None
    ) -> list[JSON]:
        result: list[JSON] = self._call(*_Routes.threads(limit, offset, resource_id))["threads"]
        return result

    def delete_thread(self, thread_id: str) -> None:
        self._call(*_Routes.thread("DELETE", thread_id))

    def append(
        self,
        thread_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        resource_id: str | None = None,
        profile: str | None = None,
        model: str | None = None,
    ) -> JSON:
        """Store messages; ``model``: the caller's model, whose provider prices images and files."""
        params = _params(model=model)
        result: JSON = self._call(
            *_Routes.messages(thread_id, "/messages", messages, resource_id, profile, params)
        )
        return result

    def turn(
        self,
        thread_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        resource_id: str | None = None,
        profile: str | None = None,
        model: str | None = None,
        format: Format = "om",
        wait: bool = True,
        prompt_cache_retention: CacheRetention | None = None,
    ) -> JSON:
        """Append the turn's messages and get the context to send, in one request (``POST …/turn``)."""
        self.flush()
        params = _Routes.context_params(model, format, wait, prompt_cache_retention)
        result: JSON = self._call(
            *_Routes.messages(thread_id, "/turn", messages, resource_id, profile, params)
        )
        return result

    def context(
        self,
        thread_id: str,
        *,
        model: str | None = None,
        format: Format = "om",
        at_version: int | None = None,
        wait: bool = True,
        prompt_cache_retention: CacheRetention | None = None,
    ) -> JSON:
        params = _Routes.context_params(model, format, wait, prompt_cache_retention, at_version)
        result: JSON = self._call(*_Routes.thread("GET", thread_id, "/context", params))
        return result

    def status(self, thread_id: str) -> JSON:
        result: JSON = self._call(*_Routes.thread("GET", thread_id, "/status"))
        return result

    def working_memory(self, thread_id: str) -> JSON:
        """The working-memory document the Observer keeps (``working_memory`` is None when there is none)."""
        result: JSON = self._call(*_Routes.thread("GET", thread_id, "/working-memory"))
        return result

    def events(
        self, thread_id: str, *, after: int = 0, limit: int = 100, types: Sequence[str] | None = None
    ) -> JSON:
        result: JSON = self._call(*_Routes.events(thread_id, after, limit, types))
        return result

    def all_events(self, thread_id: str, *, types: Sequence[str] | None = None) -> Iterator[JSON]:
        after: int | None = 0
        while after is not None:
            page = self.events(thread_id, after=after, limit=1000, types=types)
            yield from page["events"]
            after = page["next_after"]

    def observations(self, thread_id: str, *, generation: int | None = None) -> JSON:
        result: JSON = self._call(
            *_Routes.thread("GET", thread_id, "/observations", {"generation": generation})
        )
        return result

    def observe(self, thread_id: str, *, wait: bool = True) -> JSON:
        result: JSON = self._call(*_Routes.cycle(thread_id, "observe", wait))
        return result

    def reflect(self, thread_id: str, *, wait: bool = True) -> JSON:
        result: JSON = self._call(*_Routes.cycle(thread_id, "reflect", wait))
        return result

    def recall(self, thread_id: str, /, **params: Any) -> JSON:
        """The recall tool; ``params`` are the tool's own (``mode``, ``query``, ``cursor``, ``thread_id``,
        ``page``, ``limit``, …), so a model's tool call's arguments pass as they are."""
        result: JSON = self._call(*_Routes.thread("GET", thread_id, "/recall", params))
        return result

    def recall_tool(self) -> JSON:
        result: JSON = self._call("GET", "/v1/tools/recall", {})
        return result

    # --- profiles and models ---

    def profiles(self) -> list[JSON]:
        """The deployment's profiles and the tenant's own."""
        result: list[JSON] = self._call("GET", "/v1/profiles", {})["profiles"]
        return result

    def get_profile(self, name: str) -> JSON:
        result: JSON = self._call(*_Routes.profile("GET", name))
        return result

    def put_profile(self, name: str, options: Mapping[str, Any]) -> JSON:
        """Set a tenant profile (validated as a profile file is)."""
        result: JSON = self._call(*_Routes.profile("PUT", name, options))
        return result

    def delete_profile(self, name: str) -> None:
        self._call(*_Routes.profile("DELETE", name))

    def models(self) -> list[JSON]:
        """The models the OpenAI-compatible proxy offers (``GET /v1/models``)."""
        result: list[JSON] = self._call("GET", "/v1/models", {})["data"]
        return result

    def openai(
        self,
        thread_id: str | None = None,
        *,
        resource_id: str | None = None,
        profile: str | None = None,
        **options: Any,
    ) -> openai.OpenAI:
        """The ``openai`` package's client, pointed at om's proxy with this client's key, naming the thread
        (and its resource and profile) in every request's headers: ``om.openai("t1").chat.completions
        .create(model=..., messages=...)`` calls the model with the thread's memory. Each request carries an
        ``Idempotency-Key`` its retries repeat. ``options`` go to ``openai.OpenAI`` (``timeout``,
        ``max_retries``, …)."""
        import openai

        headers = _Routes.proxy_headers(thread_id, resource_id, profile)
        return _keyed(openai.OpenAI(**_openai_arguments(self._base_url, self._api_key, headers, options)))

    # --- the service ---

    def health(self) -> JSON:
        result: JSON = self._call("GET", "/healthz", {})
        return result

    def ready(self) -> JSON:
        """Readiness (``/readyz``): ``status`` is ``ready`` or ``not_ready``, with each check; a server
        that is not ready answers 503 with the same body, returned here rather than raised."""
        response = self._http.get("/readyz")
        if response.status_code not in (200, 503):
            _raise_for(response)
        result: JSON = response.json()
        return result

    def metrics(self) -> str:
        """The Prometheus exposition text of ``/metrics``."""
        response = self._http.get("/metrics")
        _raise_for(response)
        return response.text

    # --- live parts ---

    def stream(
        self,
        thread_id: str,
        *,
        last_event_id: int | None = None,
        reconnect: bool = True,
        max_reconnects: int = 100,
    ) -> Iterator[StreamPart]:
        """Yield parts as they happen; after a dropped connection, resume from the last complete event.

        The parts of one event are held until the block carrying its id arrives, so a drop in the middle
        of an event neither loses nor repeats any of them.
        """
        grouper = PartGrouper(None if last_event_id is None else str(last_event_id))
        attempts = 0
        while True:
            headers = {"Last-Event-ID": grouper.last} if grouper.last is not None else {}
            try:
                with self._http.stream("GET", f"{_t(thread_id)}/stream", headers=headers, timeout=None) as r:
                    if not r.is_success:
                        r.read()
                        _raise_for(r)
                    grouper.restart()
                    for line in r.iter_lines():
                        for part in grouper.feed(line):
                            attempts = 0
                            yield part
            except (httpx.TransportError, httpx.StreamError):
                if not reconnect or attempts >= max_reconnects:
                    raise
                attempts += 1
                time.sleep(min(2.0, 0.1 * attempts))
                continue
            if not reconnect:
                return


class PartGrouper:
    """Turns SSE lines into complete events' parts (see ``OMClient.stream``)."""

    def __init__(self, last: str | None) -> None:
        self.last = last
        self._parser = SSEParser()
        self._pending: list[str] = []

    def restart(self) -> None:
        self._parser = SSEParser()
        self._parser.last_id = self.last
        self._pending = []

    def feed(self, line: str) -> list[StreamPart]:
        event = self._parser.feed(line)
        if event is None:
            if line == "" and self._parser.last_id != self.last and not self._pending:
                self.last = self._parser.last_id  # an event with no part still moves the resume point
            return []
        data, event_id = event
        if event_id is None or event_id == self.last:
            self._pending.append(data)
            return []
        group = [*self._pending, data]
        self._pending = []
        self.last = event_id
        return [_part(d, event_id, i == len(group) - 1) for i, d in enumerate(group)]


class AsyncOMClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._base_url, self._api_key = base_url, api_key
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_Routes.headers(api_key), timeout=timeout, transport=transport
        )
        self._order = asyncio.Lock()  # FIFO: background appends land in the order they were sent
        self._pending: list[asyncio.Task[JSON]] = []

    async def __aenter__(self) -> AsyncOMClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        try:
            await self.flush()
        finally:
            await self._http.aclose()

    def append_in_background(
        self,
        thread_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        resource_id: str | None = None,
        profile: str | None = None,
    ) -> asyncio.Task[JSON]:
        """As ``OMClient.append_in_background``: a task; ``turn`` and ``flush`` await it."""

        async def send() -> JSON:
            async with self._order:
                return await self.append(thread_id, messages, resource_id=resource_id, profile=profile)

        task = asyncio.ensure_future(send())
        self._pending.append(task)
        return task

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        for task in pending:
            await task

    async def _call(self, method: str, path: str, arguments: dict[str, Any]) -> Any:
        response = await self._http.request(method, path, **arguments)
        _raise_for(response)
        return None if response.status_code == 204 else response.json()

    async def put_thread(
        self,
        thread_id: str,
        *,
        resource_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        profile: str | None = None,
    ) -> JSON:
        call = _Routes.put_thread(thread_id, resource_id, title, metadata, config, profile)
        result: JSON = await self._call(*call)
        return result

    async def get_thread(self, thread_id: str) -> JSON:
        result: JSON = await self._call(*_Routes.thread("GET", thread_id))
        return result

    async def list_threads(self, *, limit: int | None = None, offset: int | None = None) -> list[JSON]:
        result: list[JSON] = (await self._call(*_Routes.threads(limit, offset)))["threads"]
        return result

    async def resource_threads(
        self, resource_id: str, *, limit: int | None = None, offset: int | None = None
    ) -> list[JSON]:
        result: list[JSON] = (await self._call(*_Routes.threads(limit, offset, resource_id)))["threads"]
        return result

    async def delete_thread(self, thread_id: str) -> None:
        await self._call(*_Routes.thread("DELETE", thread_id))

    async def append(
        self,
        thread_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        resource_id: str | None = None,
        profile: str | None = None,
        model: str | None = None,
    ) -> JSON:
        call = _Routes.messages(thread_id, "/messages", messages, resource_id, profile, _params(model=model))
        result: JSON = await self._call(*call)
        return result

    async def turn(
        self,
        thread_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        resource_id: str | None = None,
        profile: str | None = None,
        model: str | None = None,
        format: Format = "om",
        wait: bool = True,
        prompt_cache_retention: CacheRetention | None = None,
    ) -> JSON:
        """As ``OMClient.turn``."""
        await self.flush()
        params = _Routes.context_params(model, format, wait, prompt_cache_retention)
        call = _Routes.messages(thread_id, "/turn", messages, resource_id, profile, params)
        result: JSON = await self._call(*call)
        return result

    async def context(
        self,
        thread_id: str,
        *,
        model: str | None = None,
        format: Format = "om",
        at_version: int | None = None,
        wait: bool = True,
        prompt_cache_retention: CacheRetention | None = None,
    ) -> JSON:
        params = _Routes.context_params(model, format, wait, prompt_cache_retention, at_version)
        result: JSON = await self._call(*_Routes.thread("GET", thread_id, "/context", params))
        return result

    async def status(self, thread_id: str) -> JSON:
        result: JSON = await self._call(*_Routes.thread("GET", thread_id, "/status"))
        return result

    async def working_memory(self, thread_id: str) -> JSON:
        result: JSON = await self._call(*_Routes.thread("GET", thread_id, "/working-memory"))
        return result

    async def events(
        self, thread_id: str, *, after: int = 0, limit: int = 100, types: Sequence[str] | None = None
    ) -> JSON:
        result: JSON = await self._call(*_Routes.events(thread_id, after, limit, types))
        return result

    async def all_events(self, thread_id: str, *, types: Sequence[str] | None = None) -> AsyncIterator[JSON]:
        after: int | None = 0
        while after is not None:
            page = await self.events(thread_id, after=after, limit=1000, types=types)
            for event in page["events"]:
                yield event
            after = page["next_after"]

    async def observations(self, thread_id: str, *, generation: int | None = None) -> JSON:
        call = _Routes.thread("GET", thread_id, "/observations", {"generation": generation})
        result: JSON = await self._call(*call)
        return result

    async def observe(self, thread_id: str, *, wait: bool = True) -> JSON:
        result: JSON = await self._call(*_Routes.cycle(thread_id, "observe", wait))
        return result

    async def reflect(self, thread_id: str, *, wait: bool = True) -> JSON:
        result: JSON = await self._call(*_Routes.cycle(thread_id, "reflect", wait))
        return result

    async def recall(self, thread_id: str, /, **params: Any) -> JSON:
        result: JSON = await self._call(*_Routes.thread("GET", thread_id, "/recall", params))
        return result

    async def recall_tool(self) -> JSON:
        result: JSON = await self._call("GET", "/v1/tools/recall", {})
        return result

    async def profiles(self) -> list[JSON]:
        result: list[JSON] = (await self._call("GET", "/v1/profiles", {}))["profiles"]
        return result

    async def get_profile(self, name: str) -> JSON:
        result: JSON = await self._call(*_Routes.profile("GET", name))
        return result

    async def put_profile(self, name: str, options: Mapping[str, Any]) -> JSON:
        result: JSON = await self._call(*_Routes.profile("PUT", name, options))
        return result

    async def delete_profile(self, name: str) -> None:
        await self._call(*_Routes.profile("DELETE", name))

    async def models(self) -> list[JSON]:
        result: list[JSON] = (await self._call("GET", "/v1/models", {}))["data"]
        return result

    def openai(
        self,
        thread_id: str | None = None,
        *,
        resource_id: str | None = None,
        profile: str | None = None,
        **options: Any,
    ) -> openai.AsyncOpenAI:
        """As ``OMClient.openai``: ``openai.AsyncOpenAI`` pointed at om's proxy."""
        import openai

        headers = _Routes.proxy_headers(thread_id, resource_id, profile)
        return _keyed(
            openai.AsyncOpenAI(**_openai_arguments(self._base_url, self._api_key, headers, options))
        )

    async def health(self) -> JSON:
        result: JSON = await self._call("GET", "/healthz", {})
        return result

    async def ready(self) -> JSON:
        """As ``OMClient.ready``."""
        response = await self._http.get("/readyz")
        if response.status_code not in (200, 503):
            _raise_for(response)
        result: JSON = response.json()
        return result

    async def metrics(self) -> str:
        response = await self._http.get("/metrics")
        _raise_for(response)
        return response.text

    async def stream(
        self,
        thread_id: str,
        *,
        last_event_id: int | None = None,
        reconnect: bool = True,
        max_reconnects: int = 100,
    ) -> AsyncIterator[StreamPart]:
        """As ``OMClient.stream``: parts as they happen, resuming after a dropped connection from the last
        complete event."""
        grouper = PartGrouper(None if last_event_id is None else str(last_event_id))
        attempts = 0
        while True:
            headers = {"Last-Event-ID": grouper.last} if grouper.last is not None else {}
            try:
                async with self._http.stream(
                    "GET", f"{_t(thread_id)}/stream", headers=headers, timeout=None
                ) as r:
                    if not r.is_success:
                        await r.aread()
                        _raise_for(r)
                    grouper.restart()
                    async for line in r.aiter_lines():
                        for part in grouper.feed(line):
                            attempts = 0
                            yield part
            except (httpx.TransportError, httpx.StreamError):
                if not reconnect or attempts >= max_reconnects:
                    raise
                attempts += 1
                await asyncio.sleep(min(2.0, 0.1 * attempts))
                continue
            if not reconnect:
                return
