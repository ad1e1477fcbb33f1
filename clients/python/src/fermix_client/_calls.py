"""What to send for each API operation, written once for the sync and the async client.

`Endpoints[R]` builds a `Call` per operation and hands it to `_send`, which the sync client answers
with the decoded JSON and the async client with an awaitable of it. The retry rules live here too, so
both clients retry exactly alike.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx

from fermix_client.errors import APIError, error_from

R = TypeVar("R")
JSON = dict[str, Any]
Trust = Literal["operator", "guest"]
ChatType = Literal["direct", "group", "channel"]
ToolName = Literal["memory_store", "memory_recall", "memory_forget", "memory_sources_list"]
ToolFormat = Literal["openai", "anthropic", "mcp"]
IDEMPOTENCY_HEADER = "Idempotency-Key"
RETRY_STATUSES = frozenset({429, 502, 503, 504})
IN_PROGRESS = "idempotency_in_progress"  # 409: the first attempt of this key still runs (a turn thinking)


@dataclass(frozen=True)
class Call:
    """One logical request. `idempotency_key` is chosen once, so every retry of it carries the same one."""

    method: str
    path: str
    params: JSON = field(default_factory=dict)
    body: JSON | None = None
    idempotency_key: str | None = None
    root: bool = False  # a path of the service itself (`/healthz`), not under /api/v1

    @property
    def replayable(self) -> bool:
        """Whether sending it twice is harmless: a read, or a write the server deduplicates by its key."""
        return self.method == "GET" or self.idempotency_key is not None

    def headers(self) -> dict[str, str]:
        return {IDEMPOTENCY_HEADER: self.idempotency_key} if self.idempotency_key else {}


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry: exponential backoff with jitter, `Retry-After` honoured.

    A replayable call is retried on any transport error and on 429/502/503/504, and a keyed one also on
    `409 idempotency_in_progress` (its first attempt is still running: the retry waits for its answer).
    Any other write is retried only when the server cannot have acted on it: the connection was never
    made, or a 429.
    """

    attempts: int = 4
    backoff: float = 0.5
    max_backoff: float = 8.0

    def delay(self, attempt: int, response: httpx.Response | None = None) -> float:
        """Seconds to wait before retry number `attempt` (1 for the first retry)."""
        after = _retry_after(response)
        if after is not None:
            return min(after, self.max_backoff)
        base = min(self.backoff * 2.0 ** (attempt - 1), self.max_backoff)
        return base * (0.5 + random.random() / 2)

    @staticmethod
    def retry_status(call: Call, response: httpx.Response) -> bool:
        if response.status_code == 409:
            return call.idempotency_key is not None and error_from(response).code == IN_PROGRESS
        if response.status_code not in RETRY_STATUSES:
            return False
        return call.replayable or response.status_code == 429

    @staticmethod
    def retry_error(call: Call, exc: httpx.TransportError) -> bool:
        never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
        return call.replayable or never_sent


def _retry_after(response: httpx.Response | None) -> float | None:
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def decoded(response: httpx.Response) -> JSON:
    """The answer's JSON, or the typed exception for an error answer."""
    if response.status_code >= 400:
        raise error_from(response)
    if not response.content:
        return {}
    data = response.json()
    if not isinstance(data, dict):
        raise APIError(status=response.status_code, code="unexpected_body", message="the answer is not an object",
                       headers=response.headers)
    return data


def _segment(value: str | int) -> str:
    return quote(str(value), safe=":")


def _given(**fields: Any) -> JSON:
    """The fields that were given: the service applies its own defaults to the rest."""
    return {name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in fields.items() if value is not None}


class Endpoints(Generic[R]):
    """Every operation of the API; `agent` defaults to the client's."""

    agent: str

    def _send(self, call: Call) -> R:
        raise NotImplementedError

    def _agent(self, agent: str | None) -> str:
        return "/agents/" + _segment(agent or self.agent)

    def _conv(self, conversation: str, agent: str | None) -> str:
        return f"{self._agent(agent)}/conversations/{_segment(conversation)}"

    def health(self) -> R:
        """`GET /healthz` (no key needed) → `{status, …}`."""
        return self._send(Call("GET", "/healthz", root=True))

    # --- conversations ---------------------------------------------------------------------------

    def append(self, conversation: str, content: str, *, role: str = "user", sender: str | None = None,
               owner_id: str | None = None, trust: Trust | None = None, kind: str | None = None,
               metadata: Mapping[str, Any] | None = None, created_at: datetime | str | None = None,
               chat_type: ChatType | None = None, idempotency_key: str | None = None,
               agent: str | None = None) -> R:
        """Append one message → `{id, conversation, created_at}`. Retries reuse one Idempotency-Key, so a
        retried append is stored once; `created_at` (backfill) needs an operator key."""
        body = _given(role=role, content=content, sender=sender, owner_id=owner_id, trust=trust, kind=kind,
                      metadata=dict(metadata) if metadata is not None else None, created_at=created_at,
                      chat_type=chat_type)
        return self._send(Call("POST", self._conv(conversation, agent) + "/messages", body=body,
                               idempotency_key=idempotency_key or uuid.uuid4().hex))

    def messages(self, conversation: str, *, limit: int | None = None, agent: str | None = None) -> R:
        """The current window (after the latest checkpoint), oldest first → `{conversation, messages}`."""
        return self._send(Call("GET", self._conv(conversation, agent) + "/messages", params=_given(limit=limit)))

    def commit(self, conversation: str, *, peak_prompt_tokens: int | None, owner_id: str | None = None,
               trust: Trust | None = None, context_window: int | None = None, chat_type: ChatType | None = None,
               agent: str | None = None) -> R:
        """The turn was delivered: start the background review and the compaction check."""
        body = {"peak_prompt_tokens": peak_prompt_tokens,
                **_given(owner_id=owner_id, trust=trust, context_window=context_window, chat_type=chat_type)}
        return self._send(Call("POST", self._conv(conversation, agent) + "/commit", body=body))

    def preflight(self, conversation: str, *, owner_id: str | None = None, context_window: int | None = None,
                  agent: str | None = None) -> R:
        """Before a turn: compact if the last turn's peak crossed the threshold → `{compacted, notice}`."""
        body = _given(owner_id=owner_id, context_window=context_window)
        return self._send(Call("POST", self._conv(conversation, agent) + "/preflight", body=body))

    def compact(self, conversation: str, *, trust: Trust | None = None, agent: str | None = None) -> R:
        """`/compact`: summarise the window now (operator trust) → `{message, compacted, …}`."""
        return self._send(Call("POST", self._conv(conversation, agent) + "/compact", body=_given(trust=trust)))

    def clear(self, conversation: str, *, trust: Trust | None = None, agent: str | None = None) -> R:
        """`/new`, `/clear`: start a new window (operator trust); nothing is deleted."""
        return self._send(Call("POST", self._conv(conversation, agent) + "/clear", body=_given(trust=trust)))

    def turn(self, conversation: str, content: str, *, sender: str | None = None, owner_id: str | None = None,
             trust: Trust | None = None, context_window: int | None = None, chat_type: ChatType | None = None,
             idempotency_key: str | None = None, agent: str | None = None) -> R:
        """A whole turn through the service's provider chain: it stores the message, asks the model (with
        the memory tools), stores the reply and commits → `{reply, notices, usage, message_id, commit}`."""
        body = _given(content=content, sender=sender, owner_id=owner_id, trust=trust, context_window=context_window,
                      chat_type=chat_type)
        return self._send(Call("POST", self._conv(conversation, agent) + "/turns", body=body,
                               idempotency_key=idempotency_key or uuid.uuid4().hex))

    def prompt(self, conversation: str | None = None, *, owner_id: str | None = None, realtime: bool | None = None,
               chat_type: ChatType | None = None, trust: Trust | None = None, agent: str | None = None) -> R:
        """What the model sees for a speaker of `trust` in a chat of `chat_type` (the service's default
        trust is `guest`, who is not shown USER.md): `{system_messages, history, prompt_hash, parts, …}`."""
        params = _given(conversation=conversation, owner_id=owner_id, chat_type=chat_type, trust=trust,
                        realtime=None if realtime is None else str(realtime).lower())
        return self._send(Call("GET", self._agent(agent) + "/prompt", params=params))

    def conversations(self, *, cursor: str | None = None, limit: int | None = None, agent: str | None = None) -> R:
        """One page of conversations, newest activity first; pass the page's `next_cursor` for the next."""
        return self._send(Call("GET", self._agent(agent) + "/conversations", params=_given(cursor=cursor, limit=limit)))

    # --- memory tools ----------------------------------------------------------------------------

    def call_tool(self, name: ToolName, conversation: str, arguments: Mapping[str, Any] | None = None, *,
                  owner_id: str | None = None, trust: Trust | None = None, agent: str | None = None) -> R:
        """Run a memory tool as the model would → `{ok, result, data, …}`; a refusal is `ok: false`."""
        body = {"conversation": conversation, "arguments": dict(arguments or {}),
                **_given(owner_id=owner_id, trust=trust)}
        return self._send(Call("POST", f"{self._agent(agent)}/tools/{_segment(name)}", body=body))

    def tool_definitions(self, format: ToolFormat = "openai", *, agent: str | None = None) -> R:
        """The memory tools' definitions, ready to hand to a model in that format."""
        return self._send(Call("GET", self._agent(agent) + "/tools", params={"format": format}))

    # --- memories --------------------------------------------------------------------------------

    def memories(self, *, owner_id: str | None = None, category: str | None = None, scope_type: str | None = None,
                 archived: Literal["false", "true", "all"] | None = None, q: str | None = None,
                 state: str | None = None, limit: int | None = None, agent: str | None = None) -> R:
        """List rows newest first, or search them with `q` → `{memories: [...]}`."""
        params = _given(owner_id=owner_id, category=category, scope_type=scope_type, archived=archived, q=q,
                        state=state, limit=limit)
        return self._send(Call("GET", self._agent(agent) + "/memories", params=params))

    def memory(self, memory_id: int) -> R:
        """One row with its history."""
        return self._send(Call("GET", f"/memories/{int(memory_id)}"))

    def update_memory(self, memory_id: int, *, reason: str, value: str | None = None,
                      category: str | None = None) -> R:
        """Change a row's value or category (operator key), through admission; recorded in its history."""
        body = _given(value=value, category=category, reason=reason)
        return self._send(Call("PATCH", f"/memories/{int(memory_id)}", body=body))

    def add_memory(self, *, key: str, value: str, category: str, agent: str | None = None,
                   **fields: Any) -> R:
        """Add a long-term row (operator key); other fields (`owner_id`, `scope_type`, …) as the API takes them."""
        body = _given(key=key, value=value, category=category, **fields)
        return self._send(Call("POST", self._agent(agent) + "/memories", body=body))

    def archive_memory(self, memory_id: int, *, reason: str = "") -> R:
        """Archive a row (operator key); the prompt files are rebuilt."""
        return self._send(Call("POST", f"/memories/{int(memory_id)}/archive", body={"reason": reason}))

    def restore_memory(self, memory_id: int) -> R:
        """Un-archive a row (operator key)."""
        return self._send(Call("POST", f"/memories/{int(memory_id)}/restore"))

    def review(self, *, conversation: str | None = None, owner_id: str | None = None, agent: str | None = None) -> R:
        """`memory_review --now` (operator key) → `{total, results}`."""
        body = _given(conversation=conversation, owner_id=owner_id)
        return self._send(Call("POST", self._agent(agent) + "/review", body=body))

    # --- resources and SOUL.md -------------------------------------------------------------------

    def resources(self, *, agent: str | None = None) -> R:
        """Every resource with its current revision → `{resources: [...]}`."""
        return self._send(Call("GET", self._agent(agent) + "/resources"))

    def revisions(self, resource_type: str, *, scope: str | None = None, limit: int | None = None,
                  agent: str | None = None) -> R:
        """A resource's revisions, newest first, without content."""
        path = f"{self._agent(agent)}/resources/{_segment(resource_type)}/revisions"
        return self._send(Call("GET", path, params=_given(scope=scope, limit=limit)))

    def revision(self, resource_type: str, revision: int, *, scope: str | None = None,
                 agent: str | None = None) -> R:
        """One revision with its content."""
        path = f"{self._agent(agent)}/resources/{_segment(resource_type)}/revisions/{int(revision)}"
        return self._send(Call("GET", path, params=_given(scope=scope)))

    def diff(self, resource_type: str, a: int, b: int, *, context: int | None = None, scope: str | None = None,
             agent: str | None = None) -> R:
        """Unified diff from revision `a` to `b`."""
        path = f"{self._agent(agent)}/resources/{_segment(resource_type)}/diff"
        return self._send(Call("GET", path, params=_given(a=a, b=b, context=context, scope=scope)))

    def rollback(self, resource_type: str, revision: int, *, agent: str | None = None) -> R:
        """Make an earlier revision current again (operator key); checkpoints answer 409."""
        path = f"{self._agent(agent)}/resources/{_segment(resource_type)}/rollback"
        return self._send(Call("POST", path, body={"revision": revision}))

    def soul_propose(self, mode: Literal["review", "suggest", "revert", "reset"], *, instruction: str | None = None,
                     revision: int | None = None, trust: Trust | None = None, agent: str | None = None) -> R:
        """`/soul …`: propose a SOUL.md change (operator trust) → `{token, diff, rationale, expires_at}`."""
        body = _given(mode=mode, instruction=instruction, revision=revision, trust=trust)
        return self._send(Call("POST", self._agent(agent) + "/soul/proposals", body=body))

    def soul_apply(self, token: str, *, trust: Trust | None = None, agent: str | None = None) -> R:
        """Write the proposal's SOUL.md; a stale base is a 409."""
        path = f"{self._agent(agent)}/soul/proposals/{_segment(token)}/apply"
        return self._send(Call("POST", path, body=_given(trust=trust)))

    def soul_deny(self, token: str, *, trust: Trust | None = None, agent: str | None = None) -> R:
        """Drop the proposal without writing anything."""
        path = f"{self._agent(agent)}/soul/proposals/{_segment(token)}/deny"
        return self._send(Call("POST", path, body=_given(trust=trust)))
