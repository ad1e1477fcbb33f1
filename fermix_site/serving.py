"""How gunicorn serves Fermix: threaded workers that a slow or idle client cannot hold, errors in JSON.

gunicorn's `gthread` worker keeps idle connections in one poller and hands a connection to a thread
only when it has data, so a connection that sends nothing costs no thread, and a request that waits on
a model holds one thread, not a whole worker. Two things are added here:

- a read timeout: a client that stops sending half way through its request line, headers or body
  gives its thread back after READ_TIMEOUT seconds of silence and is answered `408 request_timeout`;
- the JSON error shape for what gunicorn answers itself (an over-long request line or header, a bad
  Content-Length, a malformed request), where gunicorn would send an HTML page.

Before Django sees a request (`at_the_edge`), two things only the raw request shows are checked:
- the URL: a path or query whose percent-escapes are not UTF-8 (`telegram:%ff`) is a 400 wherever it
  sits. Django would keep it as `%FF` text in a path but as U+FFFD in a query: one key, two meanings;
- the body, read now: a chunked body is read and limited like any other (Django would read it as
  empty), and a body that stops arriving is a 408 rather than a thread blocked inside a view.
"""

from __future__ import annotations

import errno
import io
import json
import socket
from urllib.parse import unquote_to_bytes

from gunicorn.http import errors as http_errors
from gunicorn.util import write_nonblock
from gunicorn.workers import gthread

# Seconds of silence after which a client that is half way through sending a request is dropped.
READ_TIMEOUT = 10.0
# A new connection's first bytes usually arrive with it; one that sends nothing for this long goes
# back to the poller (where it costs no thread) instead of holding a thread for gunicorn's 5 s.
FIRST_BYTES_WAIT = 0.5

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
        return 408, "request_timeout", f"the request did not arrive in full (nothing for {READ_TIMEOUT:g} s)"
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
    def wait_for_data(self, timeout):
        return super().wait_for_data(min(timeout, FIRST_BYTES_WAIT))


class ThreadWorker(gthread.ThreadWorker):
    """gunicorn's threaded worker with the read timeout and JSON errors (see the module docstring)."""

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
