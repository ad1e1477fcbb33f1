"""How gunicorn serves Fermix: threaded workers that a slow or idle client cannot hold, errors in JSON.

gunicorn's `gthread` worker keeps idle connections in one poller and hands a connection to a thread
only when it has data, so a connection that sends nothing costs no thread, and a request that waits on
a model holds one thread, not a whole worker. Three things are added here:

- a request is handed to a thread only once it has arrived: its request line and headers, and its
  body when a Content-Length of at most the body limit announces it. Until then each new piece is
  taken without waiting and the connection goes back to the poller, so a client that sends half a
  request and stops holds no thread, however many such clients there are;
- a read timeout: a request that has not arrived READ_TIMEOUT seconds after its first byte, that goes
  silent for SILENCE_S seconds before it has, or whose chunked body (read by a thread) goes silent for
  READ_TIMEOUT seconds, is answered `408 request_timeout`;
- the JSON error shape for what gunicorn answers itself (an over-long request line or header, a bad
  Content-Length, a malformed request), where gunicorn would send an HTML page.

Before Django sees a request (`at_the_edge`), two things only the raw request shows are checked:
- the URL: a path or query whose percent-escapes are not UTF-8 (`telegram:%ff`) is a 400 wherever it
  sits. Django would keep it as `%FF` text in a path but as U+FFFD in a query: one key, two meanings;
- the body, read now: a chunked body is read and limited like any other (Django would read it as
  empty), and a body that stops arriving is a 408 rather than a thread blocked inside a view.

Each worker sends `web_worker_started` once the application is loaded, before its first request, for
what an app would rather have ready than load inside a request (the memory app's embedding model).
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import socket
import sys
import time
from pathlib import Path
from urllib.parse import unquote_to_bytes

from django.dispatch import Signal
from gunicorn import glogging, util
from gunicorn.http import errors as http_errors
from gunicorn.util import write_nonblock
from gunicorn.workers import gthread

# Seconds of silence after which a client that is half way through sending a request is dropped.
READ_TIMEOUT = 10.0
# How long a connection may be silent (sending nothing, or stopped half way through a request) before
# the worker drops it, answering 408 if a request had begun: gunicorn's keep-alive, which `serve` sets.
SILENCE_S = 5
# The most a request's head may take before a thread parses it anyway (gunicorn then refuses it, 431).
HEAD_LIMIT = 128 * 1024
BODY_LIMIT = 1024 * 1024  # the API's own limit (DATA_UPLOAD_MAX_MEMORY_SIZE); a longer body is refused unread
CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)[ \t]*(?=\r\n)", re.IGNORECASE)
WAITS_FOR_CONTINUE = re.compile(rb"\r\nexpect:[ \t]*100-continue", re.IGNORECASE)

_CLIENT_ERRORS = [  # (gunicorn's exception, status, code, message), the first match wins
    (http_errors.LimitRequestLine, 414, "request_line_too_long",
     "the request line (method, path and query) is too long; send long values in the body"),
    (http_errors.LimitRequestHeaders, 431, "headers_too_large", "the request headers are too many or too large"),
    (http_errors.UnsupportedTransferCoding, 501, "unsupported_transfer_coding",
     "the Transfer-Encoding is not supported; send chunked or a Content-Length"),
    (http_errors.ExpectationFailed, 417, "expectation_failed", "the Expect header is not supported"),
    (http_errors.InvalidHeader, 400, "invalid_header", "a request header is malformed (a bad Content-Length?)"),
    (http_errors.InvalidHeaderName, 400, "invalid_header", "a request header name is malformed"),
    (http_errors.ParseException, 400, "invalid_request", "the request is not valid HTTP/1.1"),
]


# Sent in each web worker once the application is loaded, before the worker takes its first request: an
# app starts there what a request would otherwise wait for on first use (the local embedding model).
web_worker_started = Signal()

DEFAULT_THREADS = 32
# The worker timeout is only for a worker that stops answering its master; it must outlast the longest
# request, a turn, so that a turn that spends its whole budget answers 504 instead of being killed.
WORKER_TIMEOUT_MARGIN_S = 30
# A graceful stop (SIGTERM) lets each request being read finish or time out before a worker is killed.
GRACEFUL_S = int(READ_TIMEOUT) + 5


def gunicorn_command(*, address: str, workers: int, threads: int, run_dir: Path, turn_ms: int) -> list[str]:
    """How gunicorn is started: `manage.py serve` runs it, and so does the HTTP benchmark."""
    return [sys.executable, "-m", "gunicorn", "fermix_site.wsgi:application", "--bind", address,
            "--worker-class", "fermix_site.serving.ThreadWorker", "--workers", str(workers), "--threads", str(threads),
            "--timeout", str(turn_ms // 1000 + WORKER_TIMEOUT_MARGIN_S), "--graceful-timeout", str(GRACEFUL_S),
            "--keep-alive", str(SILENCE_S), "--control-socket", str(run_dir / "gunicorn.ctl"),
            "--worker-tmp-dir", str(run_dir), "--access-logfile", "-",
            "--logger-class", "fermix_site.serving.AccessLog"]


class AccessLog(glogging.Logger):
    """gunicorn's access log without the answers a client is expected to meet (4xx: a missing key, a
    refused write, an unknown page), unless FERMIX_LOG_LEVEL is DEBUG; 2xx, 3xx and 5xx stay."""

    def access(self, resp, req, environ, request_time):
        status = getattr(resp, "status_code", None)
        if status is not None and 400 <= int(status) < 500 and os.environ.get("FERMIX_LOG_LEVEL", "INFO") != "DEBUG":
            return
        super().access(resp, req, environ, request_time)


class RequestTimeout(Exception):
    """The client went silent half way through its request."""


def error_bytes(status: int, code: str, message: str) -> bytes:
    """A whole HTTP answer in the API's error shape, for a connection that is closed after it."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (f"HTTP/1.1 {status} {code.replace('_', ' ').capitalize()}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


def classify(exc: Exception) -> tuple[int, str, str]:
    """The (status, code, message) gunicorn's own refusal of a request is answered with."""
    if isinstance(exc, RequestTimeout):
        return 408, "request_timeout", (f"the request did not arrive in full in time (silent for {SILENCE_S} s, "
                                        f"or not whole {READ_TIMEOUT:g} s after its first byte)")
    for kind, status, code, message in _CLIENT_ERRORS:
        if isinstance(exc, kind):
            return status, code, message
    return 500, "internal_error", "the server failed to answer; the error is logged"


class ClientSocket(socket.socket):
    """A client connection whose blocking reads give up after READ_TIMEOUT seconds of silence.

    gunicorn puts a connection in blocking mode before a thread reads a request from it; here that
    mode has a timeout. A timeout gunicorn sets itself (draining a body it did not read) is left as is.
    """

    _patient = False

    @classmethod
    def adopt(cls, sock: socket.socket) -> ClientSocket:
        return cls(sock.family, sock.type, sock.proto, fileno=sock.detach())

    def setblocking(self, flag: bool) -> None:
        super().settimeout(READ_TIMEOUT if flag else 0.0)
        self._patient = flag

    def settimeout(self, value) -> None:
        super().settimeout(value)
        self._patient = False

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        try:
            return super().recv(bufsize, flags)
        except TimeoutError:
            if self._patient:
                raise RequestTimeout() from None
            raise


class ClientConnection(gthread.TConn):
    """A connection that gathers each request without waiting for it (see `gather`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.arrived = b""  # what has come of the request being received
        self.first_byte_at: float | None = None

    def gather(self) -> bool:
        """Take what has arrived without waiting; True once the request is whole (or the client closed)."""
        self.sock.setblocking(False)
        try:
            while not _whole(self.arrived):
                piece = self.sock.recv(65536)
                if not piece:
                    return True  # the client is gone: the parser says so
                self.first_byte_at = self.first_byte_at or time.monotonic()
                self.arrived += piece
        except BlockingIOError:
            return False
        return True

    def overdue(self) -> bool:
        return self.first_byte_at is not None and time.monotonic() - self.first_byte_at > READ_TIMEOUT

    def hand_over(self) -> None:
        """Give the gathered request to gunicorn's parser, as if it had read it itself."""
        self.sock.setblocking(True)
        self.init()
        self.parser.unreader.unread(self.arrived)
        self.arrived, self.first_byte_at = b"", None

    def close(self, graceful=False):
        """Close without lingering: gunicorn's graceful close waits up to 2 s for the client to close
        its side, in the worker's one main thread, so a client that never does stalls every connection
        of the worker. What the client already sent is read off first (so no reset cuts the answer)."""
        if self.arrived:  # a request begun and never finished (the worker gave up waiting for the rest)
            _send_quietly(self.sock, error_bytes(*classify(RequestTimeout())))
        try:
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.setblocking(False)
            for _ in range(16):  # what is there now, not what a client keeps sending
                if not self.sock.recv(65536):
                    break
        except OSError:
            pass
        util.close(self.sock)


def _whole(arrived: bytes) -> bool:
    head_end = arrived.find(b"\r\n\r\n")
    if head_end < 0:
        return len(arrived) > HEAD_LIMIT
    head = arrived[:head_end + 2]
    length = CONTENT_LENGTH.findall(head)
    if len(length) != 1 or WAITS_FOR_CONTINUE.search(head) or int(length[0]) > BODY_LIMIT:
        return True  # nothing to wait for, or for gunicorn and the API to refuse as they are
    return len(arrived) - head_end - 4 >= int(length[0])


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.setblocking(False)
        sock.send(data)
    except OSError:
        pass


class ThreadWorker(gthread.ThreadWorker):
    """gunicorn's threaded worker with the read timeout and JSON errors (see the module docstring)."""

    def load_wsgi(self):
        super().load_wsgi()
        # Whatever an app starts here is ahead of time only: a part that fails must not keep the worker down.
        for receiver, result in web_worker_started.send_robust(sender=type(self)):
            if isinstance(result, Exception):
                self.log.error("web worker start: %s failed: %r", getattr(receiver, "__qualname__", receiver), result)

    def accept(self, listener):
        try:
            sock, address = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = ClientConnection(self.cfg, ClientSocket.adopt(sock), address, listener.getsockname())
        self.enqueue_req(conn)

    def handle(self, conn):
        """Parse and answer a request once it has arrived; until then, gather it and go back to the poller."""
        if not self._buffered(conn):
            if not conn.gather():
                if conn.overdue():
                    return False  # closed by the worker, which answers 408 (see ClientConnection.close)
                return gthread._DEFER
            conn.data_ready = True
            conn.hand_over()
        return super().handle(conn)

    def handle_quit(self, sig, frame):
        """A quick stop (Ctrl-C, SIGQUIT) ends the process at once, as gunicorn means it to.

        gunicorn's own shuts the thread pool down inside the signal handler: the master's SIGQUIT
        arriving just after the terminal's SIGINT runs the handler again within the first, which waits
        for the pool's lock it holds, until the master kills the worker. Threads still in a request (a
        turn waiting on its model) would also be waited for at exit. What is committed is kept either
        way; SIGTERM is the graceful stop that lets requests finish.
        """
        self.alive = False
        self.cfg.worker_int(self)
        os._exit(0)

    @staticmethod
    def _buffered(conn) -> bool:
        # A request pipelined behind the last one is already in the parser's buffer.
        return conn.initialized and bool(conn.parser.unreader.buf.getvalue())

    def handle_error(self, req, client, addr, exc):
        status, code, message = classify(exc)
        if status == 500:
            super().handle_error(req, client, addr, exc)  # logs the traceback; the answer is gunicorn's
            return
        self.log.info("refused a request from %s: %s %s (%s)", (addr or ("",))[0], status, code, exc)
        try:
            write_nonblock(client, error_bytes(status, code, message))
        except OSError:
            self.log.debug("could not send the error answer")


def read_body(environ: dict, limit: int) -> tuple[int, str, str] | None:
    """Read the request body now, into memory: at most `limit` + 1 bytes, chunked or not.

    Django then finds it in `wsgi.input` with its length in CONTENT_LENGTH (the API answers 413 past
    the limit). Returns the refusal (status, code, message) for a body that stops arriving or is cut.
    """
    chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
    length = environ.get("CONTENT_LENGTH") or ""
    if not chunked and not (length.isdigit() and 0 < int(length) <= limit):
        return None  # nothing to read, or refused by its length alone (413) before any of it is read
    wanted = limit + 1 if chunked else int(length)
    stream, parts, size = environ["wsgi.input"], [], 0
    try:
        while size < wanted:
            part = stream.read(min(65536, wanted - size))
            if not part:
                break
            parts.append(part)
            size += len(part)
    except RequestTimeout as exc:
        return classify(exc)
    if not chunked and size < wanted:
        return 400, "incomplete_body", f"the body ended after {size} of the {wanted} bytes its Content-Length promised"
    environ["wsgi.input"] = io.BytesIO(b"".join(parts))
    environ["CONTENT_LENGTH"] = str(size)
    environ.pop("HTTP_TRANSFER_ENCODING", None)
    return None


def url_problem(environ: dict) -> tuple[int, str, str] | None:
    """A path or query that is not UTF-8 once its percent-escapes are decoded."""
    try:
        environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8")
        unquote_to_bytes(environ.get("QUERY_STRING", "")).decode("utf-8")
    except UnicodeError:
        return 400, "invalid_utf8", ("the URL's percent-escapes are not UTF-8 text (encode the text as UTF-8, "
                                     "then percent-encode its bytes)")
    return None


def at_the_edge(application, limit: int):
    """Wrap a WSGI application: the URL checked and the body read (its silence timed) before it runs."""

    def app(environ, start_response):
        refusal = url_problem(environ) or read_body(environ, limit)
        if refusal is None:
            return application(environ, start_response)
        status, code, message = refusal
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        start_response(f"{status} {code}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return app
