"""A loopback HTTP proxy in front of the real server that can lose answers, as a flaky network or a load
balancer does.

    with FlakyProxy(server.base) as proxy:
        proxy.faults.append(Fault("drop"))      # forward the next request, then hang up without its answer
        Client(proxy.url, api_key=key).append(...)

Faults apply to the next requests in order: `drop` forwards the request to the server and closes the
connection instead of answering (the server acted, the client never heard); `status` answers that
status itself without forwarding (a gateway's 503, a 429 with `Retry-After`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Fault:
    kind: str  # "drop" or "status"
    status: int = 503
    retry_after: str | None = None


@dataclass
class Seen:
    method: str
    path: str
    headers: dict
    fault: str


class FlakyProxy:
    def __init__(self, upstream: str):
        self.upstream = upstream
        self.faults: list[Fault] = []
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> FlakyProxy:
        handler = type("Handler", (_Handler,), {"proxy": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def take(self, method: str, path: str, headers: dict) -> Fault | None:
        with self._lock:
            fault = self.faults.pop(0) if self.faults else None
            self.seen.append(Seen(method, path, headers, fault.kind if fault else ""))
            return fault

    def requests_to(self, suffix: str, method: str = "POST") -> list[Seen]:
        return [seen for seen in self.seen if seen.method == method and seen.path.split("?")[0].endswith(suffix)]


class _Handler(BaseHTTPRequestHandler):
    proxy: FlakyProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def _relay(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        fault = self.proxy.take(self.command, self.path, {k.lower(): v for k, v in headers.items()})
        if fault and fault.kind == "status":
            return self._answer(fault.status, b'{"error": {"code": "gateway", "message": "scripted"}}',
                                {"content-type": "application/json",
                                 **({"retry-after": fault.retry_after} if fault.retry_after else {})})
        upstream = httpx.request(self.command, self.proxy.upstream + self.path, headers=headers, content=body,
                                 timeout=120)
        if fault and fault.kind == "drop":
            self.close_connection = True  # the server's answer is lost on the way back
            return
        self._answer(upstream.status_code, upstream.content,
                     {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP | {"content-encoding"}})

    def _answer(self, status: int, body: bytes, headers: dict):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_DELETE = _relay
