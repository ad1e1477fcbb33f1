"""The soak: a bounded load on a real stack, gunicorn (2 workers) and the django-q2 cluster (2 workers) on SQLite.

Owner bots append, commit and run turns; a channel bot speaks for guests in group chats and tries what
CONTRACT §8 refuses them; an operator reviews, reads prompts and rolls USER.md back; the cluster reviews
and compacts meanwhile. With faults (the default), 50 half-sent connections are held open and some
turns wait 5 s for their model (`bench/load_traffic.py`). Afterwards the stack is stopped and checked
(`bench/load_checks.py`); the run prints p50/p95 per request kind and every failed check, and exits 1
when one failed. Traffic goes only to 127.0.0.1; every loop is bounded in count and time.

    python -m bench.load --seconds 600          # the soak (`make soak`)
    python -m bench.load --seconds 60 --no-faults
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import load_traffic as traffic  # noqa: E402
from bench.django_env import free_port  # noqa: E402
from bench.load_checks import failures, verify  # noqa: E402
from tests.fakeprovider import FakeProvider, provider_config_toml  # noqa: E402

DRAIN_S = 120


class Stack:
    """FERMIX_HOME, a fake model on loopback, the web server and the task cluster; an operator key and a
    channel key."""

    root = ROOT

    def __init__(self, home: Path, web_workers: int = 2, cluster_workers: int = 2):
        self.home, self.port = home, free_port()
        self.fake = FakeProvider().start()
        self.fake.responder = traffic.model_answers
        (home / "config.toml").write_text(
            provider_config_toml(self.fake, context_window=traffic.CONTEXT_WINDOW)
            + "\n[fermix_core.memory]\nreview_interval_hours = 0.0001\nreview_failure_backoff_ms = 1000\n")
        self.env = {**os.environ, "FERMIX_HOME": str(home), "FERMIX_PORT": str(self.port),
                    "FERMIX_WORKERS": str(cluster_workers), "DJANGO_SETTINGS_MODULE": "fermix_site.settings",
                    "FERMIX_LOG_LEVEL": "INFO"}
        self.env.pop("DATABASE_URL", None)
        self.env.pop("REDIS_URL", None)
        self._manage("migrate", "-v0")
        self._manage("fermix_setup", "--noinput")  # as `make run` does: the bootstrap files are prompt files too
        self.key = self._new_key("load", "operator")
        self.channel_key = self._new_key("group-bot", "channel")
        self.server = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--web-workers", str(web_workers)], cwd=ROOT, env=self.env,
            stdout=open(home / "serve.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)  # noqa: SIM115
        self.base = f"http://127.0.0.1:{self.port}"
        self._wait_healthy()

    def _manage(self, *args) -> str:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, check=True,
                              capture_output=True, text=True).stdout

    def _new_key(self, name: str, role: str) -> str:
        return self._manage("apikey_create", "--name", name, "--role", role).strip().split()[-1]

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

    def drain(self, timeout: float = DRAIN_S) -> int:
        """Wait for the cluster to empty its queue; returns what is left."""
        deadline = time.monotonic() + timeout
        while self.queue_depth() and time.monotonic() < deadline:
            time.sleep(0.5)
        return self.queue_depth()

    def stop(self):
        if self.server.poll() is None:
            os.killpg(self.server.pid, signal.SIGINT)
            try:
                self.server.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)
                self.server.wait(timeout=10)
        self.fake.stop()


def _threads(stack, report, deadline, seed, keys, *, bots, guests, slow_bots) -> list[threading.Thread]:
    plan = ([(traffic.owner_bot, seed + i) for i in range(bots)] + [(traffic.operator, seed - 1)]
            + [(traffic.guest_bot, seed + 100 + i) for i in range(guests)]
            + [(traffic.slow_bot, seed + 200 + i) for i in range(slow_bots)] + [(traffic.health_probe, 0)])
    return [threading.Thread(target=target, args=(stack, report, deadline, s, keys)) for target, s in plan]


def run_load(*, home: Path, seconds: float, bots: int = 4, conversations: int = 6, seed: int = 7,
             guests: int = 1, faults: bool = True, slow_bots: int = 3) -> traffic.Report:
    """Run the soak for `seconds` and check it; `report.checks` holds the checks, `failures(report)` the verdict."""
    report = traffic.Report()
    stack = Stack(home)
    keys = [f"load:{i}" for i in range(conversations)]
    started = time.monotonic()
    try:
        traffic.plant_sentinels(stack, report)
        idle = traffic.IdleConnections(stack.port).start() if faults else None
        threads = _threads(stack, report, started + seconds, seed, keys, bots=bots, guests=guests,
                           slow_bots=slow_bots if faults else 0)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=seconds + 300)
        report.faults = {**(idle.stop() if idle else {}), "slow_turns": report.requests["turn_slow"]}
        report.checks["queue_left"] = stack.drain()
    finally:
        stack.stop()
    report.seconds = time.monotonic() - started
    report.checks.update(verify(stack, report))
    report.checks["model_requests"] = len(stack.fake.requests)
    return report


def summary(report: traffic.Report) -> str:
    """p50/p95 per request kind, then each failed check (or that none failed)."""
    lines = [f"{'kind':<14}{'n':>8}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}"]
    for kind, figures in report.latency_ms().items():
        lines.append(f"{kind:<14}{figures['n']:>8}{figures['p50']:>10}{figures['p95']:>10}{figures['max']:>10}")
    failed = failures(report)
    lines += ["", f"{len(failed)} check(s) failed:" if failed else "every check passed", *failed]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--bots", type=int, default=4)
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--no-faults", dest="faults", action="store_false",
                        help="without the idle connections and the slow model")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="fermix-soak-"))
    report = run_load(home=home, seconds=args.seconds, bots=args.bots, conversations=args.conversations,
                      faults=args.faults)
    print(json.dumps(report.as_dict(), indent=2, default=str))
    print(f"\nFERMIX_HOME {home}\n{summary(report)}")
    sys.exit(1 if failures(report) else 0)


if __name__ == "__main__":
    main()
