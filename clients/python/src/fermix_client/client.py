"""`Client` (blocking) and `AsyncClient` (asyncio) on httpx: the same operations, retried alike.

    with Client("http://127.0.0.1:8000", api_key="fmx_…") as fermix:
        fermix.append("telegram:42", "I drink green tea")
        reply = fermix.turn("telegram:42", "What do I drink?")["reply"]

Each operation returns the answer's JSON (a dict) or raises a `fermix_client.errors.APIError` subclass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from types import TracebackType
from typing import Any

import httpx

from fermix_client._calls import JSON, Call, Endpoints, RetryPolicy, decoded
from fermix_client.errors import TransportError

API_PREFIX = "/api/v1"
DEFAULT_TIMEOUT = httpx.Timeout(30.0, read=300.0)  # a turn may wait minutes for the model


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": "fermix-client/0.1"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _url(call: Call) -> str:
    return call.path if call.root else API_PREFIX + call.path


def _spent(call: Call, attempts: int, exc: httpx.TransportError) -> TransportError:
    return TransportError(f"{call.method} {call.path}: {exc!r} after {attempts} attempt(s)", attempts=attempts)


class Client(Endpoints[JSON]):
    """A blocking client. `agent` is the default agent id of every operation (each also takes `agent=`)."""

    def __init__(self, base_url: str, *, api_key: str | None = None, agent: str = "main",
                 retry: RetryPolicy | None = None, timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 http: httpx.Client | None = None):
        self.agent, self.retry = agent, retry or RetryPolicy()
        self._http = http or httpx.Client(base_url=base_url, headers=_headers(api_key), timeout=timeout)

    def _send(self, call: Call) -> JSON:
        for attempt in range(1, self.retry.attempts + 1):
            last = attempt == self.retry.attempts
            try:
                response = self._http.request(call.method, _url(call), params=call.params, json=call.body,
                                              headers=call.headers())
            except httpx.TransportError as exc:
                if last or not self.retry.retry_error(call, exc):
                    raise _spent(call, attempt, exc) from exc
                time.sleep(self.retry.delay(attempt))
                continue
            if last or not self.retry.retry_status(call, response):
                return decoded(response)
            time.sleep(self.retry.delay(attempt, response))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


class AsyncClient(Endpoints[Awaitable[JSON]]):
    """The same operations for asyncio: each returns an awaitable of the answer's JSON."""

    def __init__(self, base_url: str, *, api_key: str | None = None, agent: str = "main",
                 retry: RetryPolicy | None = None, timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 http: httpx.AsyncClient | None = None):
        self.agent, self.retry = agent, retry or RetryPolicy()
        self._http = http or httpx.AsyncClient(base_url=base_url, headers=_headers(api_key), timeout=timeout)

    def _send(self, call: Call) -> Awaitable[JSON]:
        return self._send_async(call)

    async def _send_async(self, call: Call) -> JSON:
        for attempt in range(1, self.retry.attempts + 1):
            last = attempt == self.retry.attempts
            try:
                response = await self._http.request(call.method, _url(call), params=call.params, json=call.body,
                                                    headers=call.headers())
            except httpx.TransportError as exc:
                if last or not self.retry.retry_error(call, exc):
                    raise _spent(call, attempt, exc) from exc
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            if last or not self.retry.retry_status(call, response):
                return decoded(response)
            await asyncio.sleep(self.retry.delay(attempt, response))
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
