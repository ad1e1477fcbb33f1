"""The real server as `make run` starts it (gunicorn and the django-q2 cluster), for tests of HTTP behaviour.

    def test_it_answers_json_to_a_long_request_line(fermix_server):
        server = fermix_server()                      # a fresh FERMIX_HOME on SQLite, started and healthy
        key = server.key("bot", "channel")
        response = server.client(key).get("/api/v1/agents/main/memories")

gunicorn answers some requests before Django sees them (a request line or header that is too long, a
client that stops half way), so Django's test client cannot show them. Each server has its own
FERMIX_HOME (and so its own SQLite database): the tests' own database and transaction are not involved,
whatever database the suite runs on.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveServer:
    """One `manage.py serve` with its own FERMIX_HOME and port; `stop()` (or the fixture) ends it."""

    def __init__(self, home: Path, *, config: str = "", env: dict | None = None, web_workers: int | None = None,
                 umask: int = -1, wrapper: list[str] = ()):
        self.home, self.port = home, free_port()
        self.umask, self.wrapper = umask, list(wrapper)  # the processes' umask; a command to run serve under
        home.mkdir(parents=True, exist_ok=True)
        if config:
            (home / "config.toml").write_text(config, encoding="utf-8")
        self.env = {**os.environ, "FERMIX_HOME": str(home), "FERMIX_PORT": str(self.port),
                    "DJANGO_SETTINGS_MODULE": "fermix_site.settings", "FERMIX_LOG_LEVEL": "WARNING",
                    **(env or {})}
        for name in ("DATABASE_URL", "REDIS_URL", "FERMIX_SECRET_KEY"):
            if name not in (env or {}):
                self.env.pop(name, None)
        self.web_workers = web_workers
        self.process: subprocess.Popen | None = None
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = home / "serve.log"

    def manage(self, *args, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, check=check,
                              capture_output=True, text=True, timeout=timeout, umask=self.umask)

    def key(self, name: str, role: str = "channel", *flags: str) -> str:
        return self.manage("apikey_create", "--name", name, "--role", role, *flags).stdout.strip().split()[-1]

    def start(self, timeout: float = 60) -> LiveServer:
        self.manage("migrate", "--noinput", "-v0")
        command = [*self.wrapper, sys.executable, "manage.py", "serve"]
        if self.web_workers:
            command += ["--web-workers", str(self.web_workers)]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, umask=self.umask)
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"the server exited ({self.process.returncode}):\n{self.log_text()[-3000:]}")
            try:
                response = httpx.get(self.base + "/healthz", timeout=2)
                if response.status_code == 200:
                    return response.json()
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the server did not answer /healthz in {timeout} s:\n{self.log_text()[-3000:]}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_lines(self, marker: str, *, until: str, timeout: float = 10) -> list[str]:
        """The log's lines naming `marker`, once one of them contains `until`: gunicorn writes a request's
        access line after its response is sent, so the client can read the answer before the line exists."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [line for line in self.log_text().splitlines() if marker in line]
            if any(until in line for line in lines) or time.monotonic() > deadline:
                return lines
            time.sleep(0.05)

    def client(self, key: str | None = None, timeout: float = 30, **kwargs) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=timeout, **kwargs)

    def raw(self, data: bytes, timeout: float = 10) -> bytes:
        """Send bytes as they are on a new connection; return all the server answers before it closes."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(data)
            chunks = []
            while True:
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks) and _complete(b"".join(chunks)):
                    break
        return b"".join(chunks)

    def kill(self) -> None:
        """SIGKILL the web server and the cluster at once (a crash, a power cut of the processes)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.kill()


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(body) >= int(value.strip())
    return False


def status_and_json(answer: bytes) -> tuple[int, dict | None]:
    """The status and JSON body of a raw HTTP answer (None when the body is not JSON)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    if b"transfer-encoding: chunked" in head.lower():
        body = _unchunk(body)
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def _unchunk(body: bytes) -> bytes:
    parts = []
    while body:
        size, _, rest = body.partition(b"\r\n")
        length = int(size.split(b";")[0] or b"0", 16)
        if not length:
            break
        parts.append(rest[:length])
        body = rest[length + 2:]
    return b"".join(parts)


@pytest.fixture
def fermix_server(tmp_path):
    """A factory of started LiveServers (`fermix_server(config=…)`), each stopped after the test."""
    servers: list[LiveServer] = []

    def start(*, home: Path | None = None, started: bool = True, **options) -> LiveServer:
        server = LiveServer(home or tmp_path / f"home{len(servers)}", **options)
        servers.append(server)
        return server.start() if started else server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One started LiveServer for a whole test module, with an operator key as `.operator`."""
    server = LiveServer(tmp_path_factory.mktemp("served") / "home").start()
    server.operator = server.key("ops", "operator")
    yield server
    server.stop()
