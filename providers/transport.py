"""One bounded JSON POST: a deadline, a size cap on the answer, and failures sorted into transient or not."""

from __future__ import annotations

import json
import re
import time

import httpx

from providers.errors import ContextLengthError, ProviderError

MAX_ANSWER_BYTES = 8 * 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024

# What OpenAI, Anthropic, vLLM, llama.cpp server, OpenRouter and friends say when the prompt is too long.
CONTEXT_TOO_LONG = re.compile(
    r"context[_ ]length|context[_ ]window|maximum context|context size|exceed_context"
    r"|prompt is too long|input is too long|too many (input |prompt )?tokens|reduce the length",
    re.IGNORECASE,
)


def post_json(client: httpx.Client, url: str, *, headers: dict, body: dict, timeout_s: float) -> dict:
    """POST `body` and return the answer's JSON object, or raise ProviderError.

    The timeout bounds every wait (connect, send, each read) and the body read as a whole stops at
    the deadline, so a server that trickles bytes cannot hold the call open for ever.
    """
    deadline = time.monotonic() + timeout_s
    try:
        with client.stream("POST", url, headers=headers, json=body, timeout=timeout_s) as response:
            if not 200 <= response.status_code < 300:
                raw = _read(response, MAX_ERROR_BYTES, deadline, timeout_s, cut=True)
                raise status_error(response.status_code, raw)
            raw = _read(response, MAX_ANSWER_BYTES, deadline, timeout_s)
    except httpx.TimeoutException as exc:
        raise ProviderError(f"timed out after {timeout_s:g} s ({type(exc).__name__})", transient=True) from exc
    except httpx.RequestError as exc:  # connect refused, reset, server hung up, bad encoding
        raise ProviderError(f"{type(exc).__name__}: {exc or 'no answer'}", transient=True) from exc
    return _json_object(raw)


def _read(response: httpx.Response, cap: int, deadline: float, timeout_s: float, cut: bool = False) -> bytes:
    declared = response.headers.get("content-length", "")
    if not cut and declared.isdigit() and int(declared) > cap:
        raise _too_large(int(declared), cap)
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            if cut:
                break
            raise _too_large(size, cap)
        if time.monotonic() > deadline:
            raise ProviderError(f"timed out after {timeout_s:g} s reading the answer", transient=True,
                                status=response.status_code)
    return b"".join(chunks)[:cap]


def _too_large(size: int, cap: int) -> ProviderError:
    # A runaway or hostile server; another provider may well answer normally.
    return ProviderError(f"answer too large (over {size} bytes, the limit is {cap})", transient=True, status=200)


def _json_object(raw: bytes) -> dict:
    # A 2xx that is not the expected JSON (a proxy's HTML page, a cut-off body) says nothing about the
    # request, only about this server, so it counts as transient and the chain moves on.
    try:
        data = json.loads(raw)
    except ValueError:
        raise ProviderError(f"answer is not valid JSON: {_snippet(raw)}", transient=True, status=200) from None
    if not isinstance(data, dict):
        raise ProviderError(f"answer is not a JSON object: {_snippet(raw)}", transient=True, status=200)
    return data


def status_error(status: int, raw: bytes) -> ProviderError:
    """The error for a non-2xx answer. 408, 429 and 5xx are transient; other codes would fail anywhere."""
    text = error_text(raw)
    if status in (400, 413, 422) and CONTEXT_TOO_LONG.search(raw.decode("utf-8", "replace")):
        return ContextLengthError(f"HTTP {status}: the prompt is too long for the model's context window: {text}",
                                  status=status)
    return ProviderError(f"HTTP {status}: {text}", transient=status in (408, 429) or status >= 500, status=status)


def error_text(raw: bytes) -> str:
    """The human part of an error body in the OpenAI, Anthropic or a plain shape."""
    try:
        data = json.loads(raw)
    except ValueError:
        return _snippet(raw) or "(empty body)"
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        kind = error.get("type") or error.get("code") or ""
        message = error.get("message") or error.get("detail") or json.dumps(error)[:500]
        return f"{kind}: {message}" if kind and isinstance(kind, str) else str(message)
    return str(error)[:500]


def _snippet(raw: bytes) -> str:
    return raw[:300].decode("utf-8", "replace").strip()
