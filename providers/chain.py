"""`chat`: one model call through the configured provider chain, every attempt traced.

The primary answers first. A transient failure (connect error, timeout, 408/429/5xx, a malformed or
oversized answer) moves on to the next provider in config order; a 4xx that every provider would also
refuse stops the chain and is raised. Each attempt writes one `ModelCall` row after the HTTP exchange,
so no database transaction is held open while a model thinks: call `chat` outside `transaction.atomic`.
"""

from __future__ import annotations

import functools
import logging
import re
import ssl
import time
import uuid
from dataclasses import replace

import httpx
from django.db import DatabaseError

from fermix_site.conf import ProviderConf, conf
from providers import anthropic, openai
from providers.base import ChatRequest, ChatResult
from providers.errors import BudgetSpent, ContextLengthError, NoProviderConfigured, ProviderError
from providers.models import ModelCall
from providers.transport import post_json

logger = logging.getLogger("fermix.providers")

ADAPTERS = {"openai": openai, "anthropic": anthropic}
ERROR_CHARS = 2000
REASONING_REFUSED = re.compile(r"reasoning|thinking", re.IGNORECASE)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS settings, built once per process: loading the CA bundle into a new context
    costs about 20 ms of CPU, more than the rest of a call's own work."""
    return httpx.create_ssl_context()


def chat(
    *,
    messages: list[dict],
    tools: list[dict] | None = None,
    agent_tag: str,
    agent_id: str,
    conversation_key: str = "",
    max_tokens: int | None = None,
    temperature: float | None = None,
    reasoning_effort: str | None = None,
    timeout_ms: int | None = None,
    deadline: float | None = None,
) -> ChatResult:
    """Ask the provider chain for one answer; raise ProviderError (or a subclass) if none gives one.

    `timeout_ms` (default `[fermix_core.timeouts] llm_buffered_ms`) bounds each attempt. `deadline`
    (a `time.monotonic()` value) bounds the whole chain: no attempt outlasts it, and BudgetSpent is
    raised once it has passed. When every provider fails transiently, the raised error lists them all
    in `failures`.
    """
    if not agent_tag or not agent_id:
        raise ValueError("agent_tag and agent_id are required: every model call is traced under them")
    request = ChatRequest(messages=messages, tools=tools, max_tokens=max_tokens, temperature=temperature,
                          reasoning_effort=reasoning_effort)
    chain = conf.provider_chain
    if not chain:
        raise NoProviderConfigured()
    timeout_s = (timeout_ms if timeout_ms is not None else conf.timeouts.llm_buffered_ms) / 1000
    trace = _Trace(call_id=uuid.uuid4().hex, agent_id=agent_id, agent_tag=agent_tag,
                   conversation_key=conversation_key)
    failures: list[ProviderError] = []
    with httpx.Client(follow_redirects=False, verify=_tls_context()) as client:
        for index, provider in enumerate(chain):
            is_last = index == len(chain) - 1
            remaining = deadline - time.monotonic() if deadline is not None else timeout_s
            if remaining <= 0:
                raise BudgetSpent()
            try:
                result = _ask(client, provider, request, min(timeout_s, remaining), trace, is_last=is_last)
            except ProviderError as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    raise BudgetSpent() from exc
                failures.append(exc)
                if not exc.transient:
                    raise
                if not is_last:
                    logger.warning("provider %s failed for %s, trying the next one: %s", provider.name, agent_tag, exc)
                continue
            result.call_id = trace.call_id
            return result
    raise _exhausted(failures)


def _ask(client: httpx.Client, provider: ProviderConf, request: ChatRequest, timeout_s: float, trace: _Trace,
         *, is_last: bool) -> ChatResult:
    """One provider's answer, traced; retried once without reasoning_effort if the model refuses it."""
    started = time.monotonic()
    try:
        result = _attempt(client, provider, request, timeout_s)
    except ProviderError as exc:
        exc.provider = provider.name
        if _refuses_reasoning(exc, request):
            # A model without a reasoning setting: the answer matters more than the effort.
            trace.record(provider, started, ModelCall.Outcome.FALLBACK, exc,
                         note=" (retrying without reasoning_effort)")
            return _ask(client, provider, replace(request, reasoning_effort=None), timeout_s, trace, is_last=is_last)
        moves_on = exc.transient and not is_last
        trace.record(provider, started, ModelCall.Outcome.FALLBACK if moves_on else ModelCall.Outcome.FAILED, exc)
        raise
    trace.record(provider, started, ModelCall.Outcome.OK, result=result)
    return result


def _attempt(client: httpx.Client, provider: ProviderConf, request: ChatRequest, timeout_s: float) -> ChatResult:
    adapter = ADAPTERS[provider.kind]
    url, headers, body = adapter.build(provider, request)
    try:
        if provider.api_key_env and not provider.api_key:
            # Only this provider is unusable, so the chain may still answer through the next one.
            raise ProviderError(f"environment variable {provider.api_key_env} (api_key_env) is not set",
                                transient=True)
        data = post_json(client, url, headers=headers, body=body, timeout_s=timeout_s)
    except ProviderError as exc:
        raise named(exc, provider.name, url) from exc.__cause__
    parsed = adapter.parse(data)
    parsed["text"], parsed["tool_calls"] = storable(parsed["text"]), storable(parsed["tool_calls"])
    return ChatResult(**parsed, provider=provider.name, model=provider.model,
                      context_window=provider.context_window, raw=data)


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(value):
    """What the model wrote (its text, or its tool calls: every string in them, keys included) as every
    database keeps it: without NULs (PostgreSQL refuses them, messages refuse them) and with U+FFFD for a
    lone surrogate (an emoji cut in half, which JSON carries and UTF-8 cannot). An answer must not be lost,
    nor blamed on the caller, nor fail a tool, for a character."""
    if isinstance(value, str):
        value = value.replace("\x00", "")
        if _SURROGATE.search(value):
            value = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return value


def named(exc: ProviderError, provider_name: str, url: str) -> ProviderError:
    """The same error, its message saying which provider and URL it came from (what an operator fixes)."""
    exc.args = (f"provider {provider_name} ({url}): {exc}",)
    exc.provider = provider_name
    return exc


def _refuses_reasoning(exc: ProviderError, request: ChatRequest) -> bool:
    return (request.reasoning_effort is not None and exc.status == 400 and not isinstance(exc, ContextLengthError)
            and bool(REASONING_REFUSED.search(str(exc))))


def _exhausted(failures: list[ProviderError]) -> ProviderError:
    if len(failures) == 1:
        return failures[0]
    summary = "; ".join(str(failure) for failure in failures)
    error = ProviderError(f"all {len(failures)} providers failed: {summary}", transient=True,
                          status=failures[-1].status, provider=failures[-1].provider)
    error.failures = failures
    return error


class _Trace:
    """Writes the ModelCall rows of one chat() call, numbering its attempts."""

    def __init__(self, **fields):
        self.fields = fields
        self.call_id = fields["call_id"]
        self.attempt = 0

    def record(self, provider: ProviderConf, started: float, outcome: str, error: ProviderError | None = None,
               *, result: ChatResult | None = None, note: str = "") -> None:
        row = ModelCall(
            **self.fields,
            provider=provider.name,
            kind=provider.kind,
            model=provider.model[:200],
            attempt=self.attempt,
            prompt_tokens=result.prompt_tokens if result else 0,
            completion_tokens=result.completion_tokens if result else 0,
            latency_ms=round((time.monotonic() - started) * 1000),
            outcome=outcome,
            http_status=error.status if error else 200,
            error=(str(error) + note)[:ERROR_CHARS] if error else "",
        )
        row.agent_id, row.agent_tag = row.agent_id[:64], row.agent_tag[:64]
        row.conversation_key = row.conversation_key[:255]
        self.attempt += 1
        try:
            row.save()
        except DatabaseError:
            # Losing a trace row is better than losing an answer the provider already produced.
            logger.exception("could not record the model call of %s to %s", row.agent_tag, row.provider)
