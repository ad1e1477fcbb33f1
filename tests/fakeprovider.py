"""A real model provider on loopback for tests: OpenAI chat completions and embeddings, the Anthropic Messages API.

    def test_it_answers(fake_provider):
        fake_provider.push(Reply(text="hello"))
        with use_config(provider_config_toml(fake_provider)):
            ...

Replies are scripted: `push` queues them (optionally for one model name only, so a primary and a
fallback on the same server can be told apart), and when no queued reply is left `responder(request)`
answers. Every request is recorded in `requests`. It is a real HTTP server, so a second process (a
django-q2 cluster, gunicorn) started by a test reaches it through the URL in the test's config.toml.
Like the real APIs, it answers 400 to requests they would refuse (see `_invalid`). `POST /v1/embeddings`
answers each input with `fake_embedding(text, dimensions)` (the request's `dimensions`, 32 without), a
hashed bag of words, so texts sharing words get similar vectors.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fermix_site import conf as conf_module

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
EMBEDDINGS_PATH = "/v1/embeddings"
FAKE_EMBEDDING_DIMENSIONS = 32


@dataclass
class Reply:
    """One scripted answer, rendered in the dialect of the path it answers.

    `text` and `tool_calls` (each `{"name", "arguments": dict, "id"?}`) make a normal answer; `status`
    with `error` an error body; `body` is sent as is; `size` streams that many bytes of padding
    (`declare_size=False` sends it chunked, without Content-Length; `trickle` seconds between 16-byte
    pieces makes it slow); `hang_up` closes the connection without answering; `delay` (seconds) comes
    first. Tokens default to the request's bytes / 4.
    """

    text: str | None = "fake reply"
    tool_calls: list[dict] = field(default_factory=list)
    status: int = 200
    error: str = ""
    error_type: str = ""
    body: bytes | None = None
    size: int = 0
    declare_size: bool = True
    trickle: float = 0
    hang_up: bool = False
    delay: float = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cache_read_tokens: int = 0
    finish_reason: str | None = None
    headers: dict = field(default_factory=dict)


def error(status: int, message: str = "scripted failure", error_type: str = "") -> Reply:
    return Reply(status=status, error=message, error_type=error_type)


def garbage(body: bytes = b"<html>502 Bad Gateway</html>", status: int = 200) -> Reply:
    return Reply(status=status, body=body, headers={"content-type": "text/html"})


def tool_call(name: str, arguments: dict | str, *, call_id: str | None = None, text: str | None = None) -> Reply:
    return Reply(text=text, tool_calls=[{"name": name, "arguments": arguments, "id": call_id}])


@dataclass
class Request:
    method: str
    path: str
    headers: dict  # names lower-cased
    raw: bytes
    body: dict | None

    @property
    def model(self) -> str | None:
        return (self.body or {}).get("model")


class FakeProvider:
    def __init__(self):
        self.requests: list[Request] = []
        self.responder: Callable[[Request], Reply] = lambda request: Reply()
        # What `GET /v1/models` (the listing doctor asks for) answers: a status and a JSON body.
        self.models_answer: tuple[int, dict] = (200, {"object": "list", "data": [
            {"id": name, "object": "model"} for name in ("primary-model", "fallback-model", "claude-test")]})
        self._queues: dict[str | None, list[Reply]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- life cycle -----------------------------------------------------------------------------

    def start(self) -> FakeProvider:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.block_on_close = False  # a handler still sleeping out a delay must not hold up stop()
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def base_url(self, kind: str = "openai") -> str:
        """The `base_url` for config.toml: OpenAI-style with `/v1`, Anthropic-style without."""
        return self.url + "/v1" if kind == "openai" else self.url

    # --- script and record ----------------------------------------------------------------------

    def push(self, *replies: Reply, model: str | None = None) -> None:
        """Queue replies; with `model`, only requests for that model take them."""
        with self._lock:
            self._queues.setdefault(model, []).extend(replies)

    def pending(self) -> int:
        with self._lock:
            return sum(len(queue) for queue in self._queues.values())

    def requests_for(self, model: str) -> list[Request]:
        return [request for request in self.requests if request.model == model]

    def _next_reply(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            for key in (request.model, None):
                if self._queues.get(key):
                    return self._queues[key].pop(0)
        return self.responder(request)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeProvider
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # keep test output clean
        pass

    def do_GET(self):
        request = Request("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, b"", None)
        with self.fake._lock:
            self.fake.requests.append(request)
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(*self.fake.models_answer)
        else:
            self._send_json(404, {"error": {"message": f"no such path {self.path}", "type": "not_found"}})

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        request = Request("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, raw, body)
        reply = self.fake._next_reply(request)
        if reply.delay and self.fake._stopping.wait(reply.delay):
            return
        try:
            self._answer(request, reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout, size cap): expected

    def _answer(self, request: Request, reply: Reply) -> None:
        if reply.hang_up:
            self.close_connection = True
            return
        if reply.size:
            return self._stream_padding(reply)
        if reply.body is not None:
            return self._send(reply.status, reply.body, reply.headers)
        dialect = {OPENAI_PATH: "openai", ANTHROPIC_PATH: "anthropic", EMBEDDINGS_PATH: "embeddings"}.get(
            request.path)
        if dialect is None:
            return self._send_json(404, {"error": {"message": f"no route {request.path}", "type": "not_found"}})
        problem = _invalid(dialect, request)
        if problem:
            return self._send_json(400, _error_body(dialect, problem, "invalid_request_error"))
        if reply.status >= 300:
            return self._send_json(reply.status, _error_body(dialect, reply.error, reply.error_type), reply.headers)
        render = {"openai": _openai_answer, "anthropic": _anthropic_answer, "embeddings": _embeddings_answer}[dialect]
        self._send_json(reply.status, render(request, reply), reply.headers)

    def _send_json(self, status: int, data: dict, headers: dict | None = None) -> None:
        self._send(status, json.dumps(data).encode(), {"content-type": "application/json", **(headers or {})})

    def _send(self, status: int, body: bytes, headers: dict) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream_padding(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("content-type", "application/json")
        if reply.declare_size:
            self.send_header("content-length", str(reply.size))
        else:
            self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        chunk, sent = b" " * (16 if reply.trickle else 65536), 0
        while sent < reply.size and not self.fake._stopping.wait(reply.trickle):
            part = chunk[: reply.size - sent]
            self.wfile.write(part if reply.declare_size else b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
            sent += len(part)
        if not reply.declare_size:
            self.wfile.write(b"0\r\n\r\n")


def _tokens(request: Request, reply: Reply) -> tuple[int, int]:
    prompt = reply.prompt_tokens if reply.prompt_tokens is not None else max(1, len(request.raw) // 4)
    completion = reply.completion_tokens if reply.completion_tokens is not None else max(
        1, len(reply.text or "") // 4 + 10 * len(reply.tool_calls))
    return prompt, completion


def _call_id(call: dict, prefix: str) -> str:
    return call.get("id") or f"{prefix}{uuid.uuid4().hex[:12]}"


def _openai_answer(request: Request, reply: Reply) -> dict:
    prompt, completion = _tokens(request, reply)
    message: dict = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": _call_id(call, "call_"), "type": "function",
             "function": {"name": call["name"], "arguments": call["arguments"] if isinstance(call["arguments"], str)
                          else json.dumps(call["arguments"])}}
            for call in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "model": request.model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _anthropic_answer(request: Request, reply: Reply) -> dict:
    prompt, completion = _tokens(request, reply)
    content = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [{"type": "tool_use", "id": _call_id(call, "toolu_"), "name": call["name"],
                 "input": call["arguments"]} for call in reply.tool_calls]
    return {
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": prompt - reply.cache_read_tokens, "output_tokens": completion,
                  "cache_read_input_tokens": reply.cache_read_tokens},
    }


def fake_embedding(text: str, dimensions: int = FAKE_EMBEDDING_DIMENSIONS) -> list[float]:
    """Each word adds ±1 where its hash points: deterministic, not unit length (as some servers answer)."""
    vector = [0.0] * dimensions
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dimensions] += 1.0 if digest[4] & 1 else -1.0
    return vector


def _embeddings_answer(request: Request, reply: Reply) -> dict:
    inputs = request.body["input"]
    inputs = [inputs] if isinstance(inputs, str) else inputs
    dimensions = request.body.get("dimensions", FAKE_EMBEDDING_DIMENSIONS)
    tokens = sum(len(text.split()) for text in inputs)
    return {
        "object": "list",
        "model": request.model,
        "data": [{"object": "embedding", "index": i, "embedding": fake_embedding(text, dimensions)}
                 for i, text in enumerate(inputs)],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _error_body(dialect: str, message: str, error_type: str) -> dict:
    if dialect == "anthropic":
        return {"type": "error", "error": {"type": error_type or "api_error", "message": message}}
    return {"error": {"message": message, "type": error_type or "server_error", "param": None, "code": None}}


def _invalid(dialect: str, request: Request) -> str:
    """What the real API would refuse in this request, or ""."""
    body = request.body
    if dialect == "embeddings":
        return _invalid_embeddings(body)
    if not isinstance(body, dict) or not body.get("model") or not isinstance(body.get("messages"), list):
        return "model and messages are required"
    if dialect == "anthropic":
        return _invalid_anthropic(request, body)
    open_calls: set[str] = set()
    for message in body["messages"]:
        for call in message.get("tool_calls") or []:
            if not isinstance(call.get("function", {}).get("arguments"), str):
                return "tool_calls[].function.arguments must be a string"
            open_calls.add(call["id"])
        if message.get("role") == "tool" and message.get("tool_call_id") not in open_calls:
            return "messages with role 'tool' must be a response to a preceding message with 'tool_calls'"
    return ""


def _invalid_embeddings(body) -> str:
    if not isinstance(body, dict) or not body.get("model") or "input" not in body:
        return "model and input are required"
    inputs = body["input"]
    inputs = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) and t for t in inputs):
        return "'$.input' is invalid: a non-empty string or a list of non-empty strings"
    if len(inputs) > 2048:
        return "'$.input' must have at most 2048 items"
    dimensions = body.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or dimensions < 1):
        return "dimensions must be a positive integer"
    return ""


def _invalid_anthropic(request: Request, body: dict) -> str:
    if "anthropic-version" not in request.headers:
        return "anthropic-version: header is required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    previous_tool_uses: set[str] = set()
    for message in body["messages"]:
        if message.get("role") not in ("user", "assistant"):
            return f"messages: Unexpected role {message.get('role')!r}; use the top-level system parameter"
        blocks = message["content"] if isinstance(message["content"], list) else []
        results = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        if previous_tool_uses - results:
            return "tool_use ids were found without tool_result blocks immediately after"
        if results - previous_tool_uses:
            return "unexpected tool_use_id found in tool_result blocks"
        if any(b.get("type") == "text" and not b.get("text") for b in blocks):
            return "messages: text content blocks must be non-empty"
        previous_tool_uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    return ""


def unused_port() -> int:
    """A loopback port nothing listens on (for connection-refused tests)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def provider_config_toml(server: FakeProvider | None, *, kind: str = "openai", model: str = "primary-model",
                         base_url: str | None = None, api_key_env: str | None = None,
                         context_window: int | None = None, fallbacks: list[dict] = (),
                         llm_buffered_ms: int | None = None) -> str:
    """`[fermix_core.providers.*]` TOML: a primary named `primary` on `server`, then `fallbacks`.

    `base_url` replaces the server's URL (for an address nothing listens on). Each fallback is a dict of
    `kind`, `model`, and optionally `name` (default `fallback1`, `fallback2`…), `server` (default: the
    primary's), `base_url`, `api_key_env`, `context_window`.
    """
    tables = [_provider_table("primary", server, kind=kind, model=model, base_url=base_url,
                              api_key_env=api_key_env, context_window=context_window, primary=True)]
    for index, fallback in enumerate(fallbacks, start=1):
        options = dict(fallback)
        name = options.pop("name", f"fallback{index}")
        tables.append(_provider_table(name, options.pop("server", server), **options))
    if llm_buffered_ms is not None:
        tables.append(f"[fermix_core.timeouts]\nllm_buffered_ms = {llm_buffered_ms}\n")
    return "\n".join(tables)


def _provider_table(name, server, *, kind="openai", model="fallback-model", base_url=None, api_key_env=None,
                    context_window=None, primary=False) -> str:
    lines = [f"[fermix_core.providers.{name}]", f'kind = "{kind}"',
             f'base_url = "{base_url or server.base_url(kind)}"', f'model = "{model}"']
    if api_key_env:
        lines.append(f'api_key_env = "{api_key_env}"')
    if context_window:
        lines.append(f"context_window = {context_window}")
    if primary:
        lines.append("primary = true")
    return "\n".join(lines) + "\n"


def embeddings_config_toml(server: FakeProvider | None, *, model: str = "fake-embed", base_url: str | None = None,
                           **keys) -> str:
    """`[fermix_core.embeddings]` TOML with backend `openai` on `server` (or `base_url`), plus any other keys."""
    lines = ["[fermix_core.embeddings]", 'backend = "openai"', f'base_url = "{base_url or server.base_url()}"',
             f'model = "{model}"']
    lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


@contextmanager
def use_config(text: str):
    """Write `$FERMIX_HOME/config.toml` and put it in force for the block (with the `home` fixture)."""
    home = conf_module.default_home()
    (home / "config.toml").write_text(text, encoding="utf-8")
    with conf_module.conf.use(conf_module.load()) as config:
        yield config


@pytest.fixture
def fake_provider():
    """A started FakeProvider, stopped after the test."""
    with FakeProvider() as server:
        yield server
