"""`make run`'s server: the web app and the django-q2 cluster together, stopped by Ctrl-C."""

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

pytestmark = pytest.mark.slow


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("timed out waiting")


def test_serve_runs_web_and_cluster_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    env = {**os.environ, "FERMIX_HOME": str(tmp_path), "FERMIX_PORT": str(port),
           "DJANGO_SETTINGS_MODULE": "fermix_site.settings"}
    env.pop("DATABASE_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    created = subprocess.run([sys.executable, "manage.py", "ensure_admin"], cwd=ROOT, env=env, check=True,
                             capture_output=True, text=True)
    password_file = tmp_path / "admin-password.txt"
    assert password_file.read_text().strip() in created.stdout
    assert password_file.stat().st_mode & 0o777 == 0o600

    server = subprocess.Popen([sys.executable, "manage.py", "serve"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        body = wait_for(lambda: (r := httpx.get(f"{base}/healthz")).json()["worker"]["state"] == "alive" and r.json())
        assert body["database"] == {"ok": True, "vendor": "sqlite"}
        login = httpx.get(f"{base}/admin/login/")
        assert login.status_code == 200 and "csrfmiddlewaretoken" in login.text
        assert httpx.get(f"{base}/static/admin/css/base.css").status_code == 200
    finally:
        server.send_signal(signal.SIGINT)
        output, _ = server.communicate(timeout=30)
    assert server.returncode == 0, output
    assert "Ctrl-C stops it" in output
