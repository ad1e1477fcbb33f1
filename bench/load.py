"""A bounded load on a real stack: gunicorn (2 workers) and the django-q2 cluster (2 workers) on SQLite.

Bots append messages, commit turns (some over the compaction threshold) and run whole turns; an operator
reviews, reads prompts and rolls USER.md back; the cluster reviews and compacts meanwhile. Afterwards the
database is checked directly: every acknowledged message is there with its exact content, nothing is
duplicated, every revision chain is gap-free, the FTS mirrors pass their integrity check and find every
message by its unique word. Traffic goes only to 127.0.0.1; every loop is bounded in count and time.

    python -m bench.load --seconds 600          # the soak (`make soak`)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakeprovider import FakeProvider, Reply, provider_config_toml  # noqa: E402

AGENT = "main"
CONTEXT_WINDOW = 4096
MAX_OPS_PER_BOT = 100_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _model_answers(request) -> Reply:
    """Reviewer: one fact; compactor: a summary; a turn: a short reply."""
    system = (request.body or {}).get("messages", [{}])[0].get("content", "")
    if "long-term memory" in system:
        key = f"fact{random.randrange(50)}"
        return Reply(text=json.dumps({"operations": [
            {"op": "add", "category": random.choice(["interest", "context", "goal"]), "key": key,
             "value": f"soak fact {key} {uuid.uuid4().hex[:6]}"}]}), delay=0.05)
    if "running summary" in system:
        return Reply(text="Summary of the earlier conversation.", delay=0.05)
    return Reply(text="Understood.", prompt_tokens=random.randrange(500, 4000), delay=0.02)


@dataclass
class Report:
    seconds: float = 0
    requests: Counter = field(default_factory=Counter)
    server_errors: list = field(default_factory=list)
    locked_errors: int = 0
    acknowledged: dict = field(default_factory=dict)  # message id -> content
    turns_answered: int = 0
    checks: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"seconds": round(self.seconds, 1), "requests": dict(self.requests),
                "requests_total": sum(self.requests.values()), "server_errors": self.server_errors[:20],
                "server_error_count": len(self.server_errors), "locked_errors": self.locked_errors,
                "messages_acknowledged": len(self.acknowledged), "turns_answered": self.turns_answered,
                "checks": self.checks}


class Stack:
    """FERMIX_HOME, a fake model on loopback, the web server and the task cluster."""

    def __init__(self, home: Path, web_workers: int = 2, cluster_workers: int = 2):
        self.home, self.port = home, _free_port()
        self.fake = FakeProvider().start()
        self.fake.responder = _model_answers
        (home / "config.toml").write_text(
            provider_config_toml(self.fake, context_window=CONTEXT_WINDOW)
            + "\n[fermix_core.memory]\nreview_interval_hours = 0.0001\nreview_failure_backoff_ms = 1000\n")
        self.env = {**os.environ, "FERMIX_HOME": str(home), "FERMIX_PORT": str(self.port),
                    "FERMIX_WORKERS": str(cluster_workers), "DJANGO_SETTINGS_MODULE": "fermix_site.settings",
                    "FERMIX_LOG_LEVEL": "WARNING"}
        self.env.pop("DATABASE_URL", None)
        self.env.pop("REDIS_URL", None)
        self._manage("migrate", "-v0")
        self.key = self._manage("apikey_create", "--name", "load", "--role", "operator").strip().split()[-1]
        self.server = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--web-workers", str(web_workers)], cwd=ROOT, env=self.env,
            stdout=open(home / "serve.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)  # noqa: SIM115
        self.base = f"http://127.0.0.1:{self.port}"
        self._wait_healthy()

    def _manage(self, *args) -> str:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, check=True,
                              capture_output=True, text=True).stdout

    def _wait_healthy(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base + "/healthz", timeout=2).json()["worker"]["state"] == "alive":
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.3)
        raise RuntimeError("the stack did not become healthy; see serve.log")

    @property
    def db(self) -> Path:
        return self.home / "memory.db"

    def queue_depth(self) -> int:
        with sqlite3.connect(self.db, timeout=20) as conn:
            return conn.execute("SELECT count(*) FROM django_q_ormq").fetchone()[0]

    def stop(self):
        if self.server.poll() is None:
            os.killpg(self.server.pid, signal.SIGINT)
            try:
                self.server.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)
                self.server.wait(timeout=10)
        self.fake.stop()


def _call(client, report, lock, name, method, path, **kwargs):
    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        with lock:
            report.server_errors.append(f"{name}: {type(exc).__name__}: {exc}")
        return None
    with lock:
        report.requests[name] += 1
        if response.status_code >= 500:
            report.server_errors.append(f"{name}: {response.status_code} {response.text[:200]}")
        if "locked" in response.text.lower():
            report.locked_errors += 1
    return response


def _bot(stack, report, lock, deadline, seed, conversations):
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {stack.key}"}
    with httpx.Client(base_url=stack.base + "/api/v1", headers=headers, timeout=60) as client:
        for _ in range(MAX_OPS_PER_BOT):
            if time.monotonic() > deadline:
                return
            conv = rng.choice(conversations)
            prefix = f"/agents/{AGENT}/conversations/{conv}"
            roll = rng.random()
            if roll < 0.75:
                content = f"soak{uuid.uuid4().hex} I like item {rng.randrange(1000)} " + "filler " * rng.randrange(60)
                response = _call(client, report, lock, "append", "POST", prefix + "/messages",
                                 json={"role": "user", "content": content, "trust": "operator"})
                if response is not None and response.status_code == 201:
                    with lock:
                        report.acknowledged[response.json()["id"]] = content
            elif roll < 0.92:
                peak = rng.choice([500, 1500, 3600])  # 3600 ≥ 0.85 × 4096: compaction
                _call(client, report, lock, "commit", "POST", prefix + "/commit",
                      json={"peak_prompt_tokens": peak, "context_window": CONTEXT_WINDOW, "trust": "operator"})
            else:
                content = f"soak{uuid.uuid4().hex} what do you remember about item {rng.randrange(1000)}?"
                response = _call(client, report, lock, "turn", "POST", prefix + "/turns",
                                 json={"content": content, "trust": "operator", "context_window": CONTEXT_WINDOW})
                if response is not None and response.status_code == 200:
                    with lock:
                        report.turns_answered += 1


def _operator(stack, report, lock, deadline, seed, conversations):
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {stack.key}"}
    with httpx.Client(base_url=stack.base + "/api/v1", headers=headers, timeout=120) as client:
        for _ in range(MAX_OPS_PER_BOT):
            if time.monotonic() > deadline:
                return
            roll = rng.random()
            if roll < 0.4:
                _call(client, report, lock, "review", "POST", f"/agents/{AGENT}/review",
                      json={"conversation": rng.choice(conversations)})
            elif roll < 0.7:
                _call(client, report, lock, "prompt", "GET", f"/agents/{AGENT}/prompt",
                      params={"conversation": rng.choice(conversations)})
            else:
                history = _call(client, report, lock, "history", "GET",
                                f"/agents/{AGENT}/resources/user_md/revisions")
                if history is not None and history.status_code == 200 and history.json().get("revisions"):
                    target = rng.choice(history.json()["revisions"])["revision"]
                    _call(client, report, lock, "rollback", "POST", f"/agents/{AGENT}/resources/user_md/rollback",
                          json={"revision": target})
            time.sleep(0.2)


def verify(db: Path, report: Report) -> dict:
    """The database, read directly: nothing lost or duplicated, chains gap-free, mirrors exact."""
    conn = sqlite3.connect(db, timeout=20)
    stored = dict(conn.execute("SELECT id, content FROM messages WHERE content LIKE 'soak%' AND role = 'user'"))
    lost = [i for i, content in report.acknowledged.items() if stored.get(i) != content]
    contents = Counter(stored.values())
    duplicated = [c[:40] for c, n in contents.items() if n > 1]
    gaps = []
    for agent, rtype, scope, current in conn.execute(
            "SELECT agent_id, resource_type, scope_id, current_revision FROM resources"):
        numbers = [r[0] for r in conn.execute(
            "SELECT revision FROM resource_revisions WHERE agent_id=? AND resource_type=? AND scope_id=? "
            "ORDER BY revision", (agent, rtype, scope))]
        if numbers != list(range(1, len(numbers) + 1)) or current != len(numbers):
            gaps.append(f"{agent}/{rtype}/{scope}: {numbers[:5]}… current {current}")
    integrity = []
    for mirror in ("messages_fts", "memories_fts"):
        try:
            conn.execute(f"INSERT INTO {mirror}({mirror}, rank) VALUES ('integrity-check', 1)")
        except sqlite3.DatabaseError as exc:
            integrity.append(f"{mirror}: {exc}")
    unfound = []
    for message_id, content in stored.items():
        token = content.split()[0]
        hits = [r[0] for r in conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?",
                                           (f'"{token}"',))]
        if hits != [message_id]:
            unfound.append(message_id)
    counts = dict(conn.execute("SELECT status, count(*) FROM review_runs GROUP BY status"))
    checkpoints = conn.execute("SELECT count(*) FROM messages WHERE kind = 'checkpoint'").fetchone()[0]
    conn.close()
    return {"lost": len(lost), "duplicated": len(duplicated), "revision_chain_gaps": gaps,
            "fts_integrity_errors": integrity, "fts_mismatches": len(unfound), "messages_stored": len(stored),
            "review_runs": counts, "checkpoints": checkpoints}


def run_load(*, home: Path, seconds: float, bots: int = 4, conversations: int = 6, seed: int = 7) -> Report:
    report, lock = Report(), threading.Lock()
    stack = Stack(home)
    keys = [f"load:{i}" for i in range(conversations)]
    started = time.monotonic()
    try:
        deadline = started + seconds
        threads = [threading.Thread(target=_bot, args=(stack, report, lock, deadline, seed + i, keys))
                   for i in range(bots)]
        threads.append(threading.Thread(target=_operator, args=(stack, report, lock, deadline, seed - 1, keys)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=seconds + 300)
        drain_deadline = time.monotonic() + 120
        while stack.queue_depth() and time.monotonic() < drain_deadline:
            time.sleep(0.5)
        report.checks["queue_left"] = stack.queue_depth()
    finally:
        stack.stop()
    report.seconds = time.monotonic() - started
    report.checks.update(verify(stack.db, report))
    report.checks["model_requests"] = len(stack.fake.requests)
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--bots", type=int, default=4)
    parser.add_argument("--conversations", type=int, default=6)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="fermix-soak-"))
    report = run_load(home=home, seconds=args.seconds, bots=args.bots, conversations=args.conversations)
    print(json.dumps(report.as_dict(), indent=2))
    checks = report.checks
    bad = (report.server_errors or report.locked_errors or checks["lost"] or checks["duplicated"]
           or checks["revision_chain_gaps"] or checks["fts_integrity_errors"] or checks["fts_mismatches"])
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
