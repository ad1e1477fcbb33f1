"""Message ingest over HTTP on gunicorn (2 threaded workers, started as `manage.py serve` starts them),
beside a bare Django JSON view on the same server, and the peak memory of a web worker.

The server runs with `bench.settings` (the production settings plus the bare views of `bench.urls`).
Clients are threads on loopback that each open a connection per request, the same client for every
view; blocks of the API, the bare view and an echo view alternate.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

from bench import diff
from bench.dataset import sample_messages
from bench.django_env import free_port, raw_connect, stop_group
from bench.report import Figure, ms
from bench.timing import summary
from fermix_site.conf import TimeoutsConf
from fermix_site.serving import DEFAULT_THREADS, gunicorn_command

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = 4
ROUNDS = 10
HTTP_SHARE = 0.5  # of the bare view's rate


class WebServer:
    """gunicorn with the command line of `manage.py serve`, on the benchmark's settings."""

    def __init__(self, home: str, workers: int = 2):
        self.port = free_port()
        env = {**os.environ, "FERMIX_HOME": home, "DJANGO_SETTINGS_MODULE": "bench.settings",
               "FERMIX_BENCH_VIEWS": "1", "FERMIX_LOG_LEVEL": "WARNING"}
        env.pop("DATABASE_URL", None)
        env.pop("REDIS_URL", None)
        log = open(Path(home) / "web.log", "ab")  # noqa: SIM115 (the child keeps it)
        run_dir = Path(home) / "run"
        run_dir.mkdir(mode=0o700, exist_ok=True)
        command = gunicorn_command(address=f"127.0.0.1:{self.port}", workers=workers, threads=DEFAULT_THREADS,
                                   run_dir=run_dir, turn_ms=TimeoutsConf().turn_ms)
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self._wait_up(workers)

    def _wait_up(self, workers: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if request(self.port, "GET", "/healthz")[0] == 200 and len(self.worker_pids()) == workers:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the web server did not start; see web.log")

    def worker_pids(self) -> list[int]:
        pid = self.process.pid
        try:
            return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            return []

    def memory_kib(self) -> dict[int, dict[str, int]]:
        """VmHWM (the peak resident set) and VmRSS of each worker, in KiB."""
        out = {}
        for pid in self.worker_pids():
            fields = {}
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                name, _, value = line.partition(":")
                if name in ("VmHWM", "VmRSS"):
                    fields[name] = int(value.split()[0])
            out[pid] = fields
        return out

    def stop(self) -> None:
        stop_group(self.process)


def request(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _load(port: int, calls: list[tuple], concurrency: int = CONCURRENCY):
    """Send every (method, path, body, headers) from `concurrency` threads; (seconds, latencies ms, statuses)."""
    pending, lock = iter(calls), threading.Lock()
    latencies, statuses = [], []

    def client():
        while True:
            with lock:
                call = next(pending, None)
            if call is None:
                return
            start = time.perf_counter()
            status, _ = request(port, *call)
            elapsed = (time.perf_counter() - start) * 1000
            with lock:
                latencies.append(elapsed)
                statuses.append(status)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, latencies, statuses


def _api_key() -> str:
    from api.services import apikey_create

    return apikey_create(name=f"bench-{uuid.uuid4().hex[:8]}", role="operator")[1]


def measure_http(data, count: int, raw_rate: float | None = None) -> list[Figure]:
    from django.db import connection

    key = _api_key()
    diff.prepare(data)
    connection.close()
    messages = sample_messages(data, count + 3 * CONCURRENCY * 3, seed=17)
    server = WebServer(data.home)
    try:
        started = server.memory_kib()
        auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

        def calls(kind: str, part: list[dict]) -> list[tuple]:
            out = []
            for m in part:
                body = json.dumps({"role": m["role"], "content": m["content"], "owner_id": m["owner_id"],
                                   "trust": m["trust"], "sender": m["sender"]}).encode()
                path = {"api": f"/api/v1/agents/{m['agent_id']}/conversations/{m['conversation']}/messages",
                        "bare": f"/bench/agents/{m['agent_id']}/conversations/{m['conversation']}/messages",
                        "echo": "/bench/echo"}[kind]
                out.append(("POST", path, body, auth if kind == "api" else {"Content-Type": "application/json"}))
            return out

        warm, messages = messages[:3 * CONCURRENCY * 3], messages[3 * CONCURRENCY * 3:]
        for index, kind in enumerate(("api", "bare", "echo")):
            _load(server.port, calls(kind, warm[index * 3 * CONCURRENCY:(index + 1) * 3 * CONCURRENCY]))
        results = {kind: {"seconds": 0.0, "latencies": [], "statuses": []} for kind in ("api", "bare", "echo")}
        size = len(messages) // ROUNDS
        for block in range(ROUNDS):
            part = messages[block * size:(block + 1) * size]
            for kind in ("api", "bare", "echo"):
                seconds, latencies, statuses = _load(server.port, calls(kind, part))
                results[kind]["seconds"] += seconds
                results[kind]["latencies"] += latencies
                results[kind]["statuses"] += statuses
        after_ingest = server.memory_kib()
        heavy = _heavy_reads(server.port, data, auth)
        peak = server.memory_kib()
    finally:
        server.stop()
    rates = {kind: len(r["latencies"]) / r["seconds"] for kind, r in results.items()}
    lat = {kind: summary(r["latencies"]) for kind, r in results.items()}
    errors = {kind: sum(1 for s in r["statuses"] if s >= 300) for kind, r in results.items()}
    share = rates["api"] / rates["bare"]
    raw_note = f"; {rates['api'] / raw_rate:.0%} of in-process raw sqlite3 ingest" if raw_rate else ""
    mib = [v["VmHWM"] / 1024 for v in peak.values()]
    return [
        Figure("message ingest over HTTP (gunicorn, 2 workers)", f"{rates['api']:,.0f} req/s",
               f"≥ {HTTP_SHARE * 100:.0f} % of a bare Django view", share >= HTTP_SHARE and not errors["api"],
               f"bare view {rates['bare']:,.0f} req/s", f"{share:.0%} of bare",
               f"{len(results['api']['latencies']):,} POSTs per view from {CONCURRENCY} client threads on the same "
               f"2 cores; p50/p95 {ms(lat['api']['p50'])}/{ms(lat['api']['p95'])} ms (bare "
               f"{ms(lat['bare']['p50'])}/{ms(lat['bare']['p95'])} ms); a view that writes nothing answers "
               f"{rates['echo']:,.0f} req/s{raw_note}; non-2xx answers: {errors}"),
        Figure("peak memory of a web worker (VmHWM)", f"{max(mib):.0f} MiB", "", None,
               "", "",
               f"largest of {len(mib)} workers, after ingest and {heavy}; RSS after start-up "
               f"{max(v['VmRSS'] for v in started.values()) / 1024:.0f} MiB, after the ingest "
               f"{max(v['VmHWM'] for v in after_ingest.values()) / 1024:.0f} MiB"),
    ]


def _heavy_reads(port: int, data, auth: dict) -> str:
    """The biggest answers the API gives on this data set, each a few times on both workers."""
    conn = raw_connect(data.db)
    largest = conn.execute(
        "SELECT c.agent_id, c.key FROM conversations c JOIN messages m ON m.agent_id = c.agent_id AND m.channel = "
        "c.channel AND m.chat_id = c.chat_id AND m.thread_scope = c.thread_scope AND m.id >= c.window_start_id "
        "GROUP BY c.id ORDER BY count(*) DESC LIMIT 1").fetchone()
    conn.close()
    calls = (
        [("GET", f"/api/v1/agents/main/prompt?conversation={largest[1]}", None, auth)] * 8
        + [("GET", f"/api/v1/agents/{largest[0]}/conversations/{largest[1]}/messages", None, auth)] * 8
        + [("GET", f"/api/v1/agents/{diff.AGENT}/resources/{diff.TYPE}/diff?a=1&b=2", None, auth)] * 4
        + [("GET", "/api/v1/agents/main/memories?owner_id=default", None, auth)] * 4
    )
    _, _, statuses = _load(port, calls, concurrency=2)
    return (f"{len(calls)} large reads (composed prompts, the largest window, the 1 MB diff, memory lists; "
            f"statuses {sorted(set(statuses))})")
