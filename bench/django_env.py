"""Where a benchmark runs: a throw-away FERMIX_HOME with a migrated database, a raw sqlite3 connection to
it with the service's pragmas, and the child processes (servers, clusters) a benchmark starts."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path


def setup_django(home: str | None = None) -> str:
    """Point FERMIX_HOME at `home` (a new temporary folder by default), set Django up and migrate."""
    home = home or tempfile.mkdtemp(prefix="fermix-bench-")
    os.environ["FERMIX_HOME"] = home
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fermix_site.settings")
    os.environ.setdefault("FERMIX_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return home


def raw_connect(path: str | Path) -> sqlite3.Connection:
    """A plain sqlite3 connection with the pragmas Django's connection uses (WAL, synchronous NORMAL,
    foreign keys, 20 s busy timeout), in autocommit mode so callers say BEGIN IMMEDIATE themselves."""
    conn = sqlite3.connect(str(path), timeout=20, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def db_time(moment: datetime) -> str:
    """A datetime as Django stores it in SQLite with USE_TZ: naive UTC text."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


def db_now() -> str:
    return db_time(datetime.now(UTC))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_group(process: subprocess.Popen, timeout: float = 30) -> None:
    """Stop a server started with start_new_session=True and everything it started: SIGTERM, then SIGKILL."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
