"""Python client for the om HTTP API (docs/api.md), sync (``OMClient``) and async (``AsyncOMClient``).

    with OMClient("http://127.0.0.1:8080", api_key="om_…") as om:
        window = om.turn("thread-1", [{"role": "user", "content": "hi"}], model="openai/gpt-5-mini",
                         format="openai")
        reply = ...  # the app's own model call, with window["messages"]
        om.append_in_background("thread-1", [reply])  # the next turn() waits for it

``turn`` appends the user's message and returns the context in one request; ``append`` and ``context``
do the two halves.

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
from typing import Any, Literal
from urllib.parse import quote

import httpx

JSON = dict[str, Any]


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


class _Requests:
    """What both clients send; only the transport differs."""

    @staticmethod
    def headers(api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    @staticmethod
    def messages(messages: Sequence[Mapping[str, Any]], resource_id: str | None) -> JSON:
        body: JSON = {"messages": list(messages)}
        if resource_id is not None:
            body["resource_id"] = resource_id
        return body

    @staticmethod
    def context_params(model: str | None, format: str, wait: bool, at_version: int | None = None) -> JSON:
        return _params(model=model, format=format, at_version=at_version, wait=None if wait else False)


class OMClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url, headers=_Requests.headers(api_key), timeout=timeout, transport=transport
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
        self, thread_id: str, messages: Sequence[Mapping[str, Any]], *, resource_id: str | None = None
    ) -> Future[JSON]:
        """Send an append without waiting for its answer: the reply after the model call, off the agent's
        critical path. Appends sent this way go one at a time, in order; ``turn`` and ``flush`` wait for
        them, so the next turn's message always lands after the reply."""
        if self._background is None:
            self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="om-append")
        future = self._background.submit(self.append, thread_id, messages, resource_id=resource_id)
        self._pending.append(future)
        return future

    def flush(self) -> None:
        """Wait for every append sent with ``append_in_background``; raises the first one's error."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
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
    ) -> JSON:
        body = _params(resource_id=resource_id, title=title, metadata=metadata, config=config)
        result: JSON = self._call("PUT", _t(thread_id), json=body)
        return result

    def get_thread(self, thread_id: str) -> JSON:
        result: JSON = self._call("GET", _t(thread_id))
        return result

    def list_threads(self) -> list[JSON]:
        result: list[JSON] = self._call("GET", "/v1/threads")["threads"]
        return result

    def resource_threads(self, resource_id: str) -> list[JSON]:
        result: list[JSON] = self._call("GET", f"/v1/resources/{quote(resource_id, safe='')}/threads")[
            "threads"
        ]
        return result

    def delete_thread(self, thread_id: str) -> None:
        self._call("DELETE", _t(thread_id))

    def append(
        self, thread_id: str, messages: Sequence[Mapping[str, Any]], *, resource_id: str | None = None
    ) -> JSON:
        body = _Requests.messages(messages, resource_id)
        result: JSON = self._call("POST", f"{_t(thread_id)}/messages", json=body)
        return result

    def turn(
        self,
        thread_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        resource_id: str | None = None,
        model: str | None = None,
        format: Literal["om", "openai"] = "om",
        wait: bool = True,
    ) -> JSON:
        """Append the turn's messages and get the context to send, in one request (``POST …/turn``)."""
        self.flush()
        body = _Requests.messages(messages, resource_id)
        params = _Requests.context_params(model, format, wait)
        result: JSON = self._call("POST", f"{_t(thread_id)}/turn", json=body, params=params)
        return result

    def context(
        self,
        thread_id: str,
        *,
        model: str | None = None,
        format: Literal["om", "openai"] = "om",
        at_version: int | None = None,
        wait: bool = True,
    ) -> JSON:
        params = _Requests.context_params(model, format, wait, at_version)
        result: JSON = self._call("GET", f"{_t(thread_id)}/context", params=params)
        return result

    def status(self, thread_id: str) -> JSON:
        result: JSON = self._call("GET", f"{_t(thread_id)}/status")
        return result

    def events(
        self, thread_id: str, *, after: int = 0, limit: int = 100, types: Sequence[str] | None = None
    ) -> JSON:
        params = _params(after=after, limit=limit, types=",".join(types) if types else None)
        result: JSON = self._call("GET", f"{_t(thread_id)}/events", params=params)
        return result

    def all_events(self, thread_id: str, *, types: Sequence[str] | None = None) -> Iterator[JSON]:
        after: int | None = 0
        while after is not None:
            page = self.events(thread_id, after=after, limit=1000, types=types)
            yield from page["events"]
            after = page["next_after"]

    def observations(self, thread_id: str, *, generation: int | None = None) -> JSON:
        result: JSON = self._call(
            "GET", f"{_t(thread_id)}/observations", params=_params(generation=generation)
        )
        return result

    def observe(self, thread_id: str, *, wait: bool = True) -> JSON:
        result: JSON = self._call("POST", f"{_t(thread_id)}/observe", json={"wait": wait})
        return result

    def reflect(self, thread_id: str, *, wait: bool = True) -> JSON:
        result: JSON = self._call("POST", f"{_t(thread_id)}/reflect", json={"wait": wait})
        return result

    def recall(self, thread_id: str, **params: Any) -> JSON:
        result: JSON = self._call("GET", f"{_t(thread_id)}/recall", params=_params(**params))
        return result

    def recall_tool(self) -> JSON:
        result: JSON = self._call("GET", "/v1/tools/recall")
        return result

    def health(self) -> JSON:
        result: JSON = self._call("GET", "/healthz")
        return result

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
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_Requests.headers(api_key), timeout=timeout, transport=transport
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
        self, thread_id: str, messages: Sequence[Mapping[str, Any]], *, resource_id: str | None = None
    ) -> asyncio.Task[JSON]:
        """As ``OMClient.append_in_background``: a task; ``turn`` and ``flush`` await it."""

        async def send() -> JSON:
            async with self._order:
                return await self.append(thread_id, messages, resource_id=resource_id)

        task = asyncio.ensure_future(send())
        self._pending.append(task)
        return task

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        for task in pending:
            await task

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._http.request(method, path, **kwargs)
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
    ) -> JSON:
        body = _params(resource_id=resource_id, title=title, metadata=metadata, config=config)
        result: JSON = await self._call("PUT", _t(thread_id), json=body)
        return result

    async def get_thread(self, thread_id: str) -> JSON:
        result: JSON = await self._call("GET", _t(thread_id))
        return result

    async def list_threads(self) -> list[JSON]:
        result: list[JSON] = (await self._call("GET", "/v1/threads"))["threads"]
        return result

    async def resource_threads(self, resource_id: str) -> list[JSON]:
        result: list[JSON] = (
            await self._call("GET", f"/v1/resources/{quote(resource_id, safe='')}/threads")
        )["threads"]
        return result

    async def delete_thread(self, thread_id: str) -> None:
        await self._call("DELETE", _t(thread_id))

    async def append(
        self, thread_id: str, messages: Sequence[Mapping[str, Any]], *, resource_id: str | None = None
    ) -> JSON:
        body = _Requests.messages(messages, resource_id)
        result: JSON = await self._call("POST", f"{_t(thread_id)}/messages", json=body)
        return result

    async def turn(
        self,
        thread_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        resource_id: str | None = None,
        model: str | None = None,
        format: Literal["om", "openai"] = "om",
        wait: bool = True,
    ) -> JSON:
        """As ``OMClient.turn``."""
        await self.flush()
        body = _Requests.messages(messages, resource_id)
        params = _Requests.context_params(model, format, wait)
        result: JSON = await self._call("POST", f"{_t(thread_id)}/turn", json=body, params=params)
        return result

    async def context(
        self,
        thread_id: str,
        *,
        model: str | None = None,
        format: Literal["om", "openai"] = "om",
        at_version: int | None = None,
        wait: bool = True,
    ) -> JSON:
        params = _Requests.context_params(model, format, wait, at_version)
        result: JSON = await self._call("GET", f"{_t(thread_id)}/context", params=params)
        return result

    async def status(self, thread_id: str) -> JSON:
        result: JSON = await self._call("GET", f"{_t(thread_id)}/status")
        return result

    async def events(
        self, thread_id: str, *, after: int = 0, limit: int = 100, types: Sequence[str] | None = None
    ) -> JSON:
        params = _params(after=after, limit=limit, types=",".join(types) if types else None)
        result: JSON = await self._call("GET", f"{_t(thread_id)}/events", params=params)
        return result

    async def observations(self, thread_id: str, *, generation: int | None = None) -> JSON:
        result: JSON = await self._call(
            "GET", f"{_t(thread_id)}/observations", params=_params(generation=generation)
        )
        return result

    async def observe(self, thread_id: str, *, wait: bool = True) -> JSON:
        result: JSON = await self._call("POST", f"{_t(thread_id)}/observe", json={"wait": wait})
        return result

    async def reflect(self, thread_id: str, *, wait: bool = True) -> JSON:
        result: JSON = await self._call("POST", f"{_t(thread_id)}/reflect", json={"wait": wait})
        return result

    async def recall(self, thread_id: str, **params: Any) -> JSON:
        result: JSON = await self._call("GET", f"{_t(thread_id)}/recall", params=_params(**params))
        return result

    async def recall_tool(self) -> JSON:
        result: JSON = await self._call("GET", "/v1/tools/recall")
        return result

    async def health(self) -> JSON:
        result: JSON = await self._call("GET", "/healthz")
        return result

    async def stream(self, thread_id: str, *, last_event_id: int | None = None) -> AsyncIterator[StreamPart]:
        """Parts as they happen, from one connection (resume with ``last_event_id`` after a drop)."""
        grouper = PartGrouper(None if last_event_id is None else str(last_event_id))
        headers = {"Last-Event-ID": grouper.last} if grouper.last is not None else {}
        async with self._http.stream("GET", f"{_t(thread_id)}/stream", headers=headers, timeout=None) as r:
            if not r.is_success:
                await r.aread()
                _raise_for(r)
            grouper.restart()
            async for line in r.aiter_lines():
                for part in grouper.feed(line):
                    yield part
