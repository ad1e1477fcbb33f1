"""`make run`: migrate, seed, create the admin user, then the web app and the django-q2 cluster together."""

import os
import signal
import socket
import subprocess
import time

import httpx
import pytest

from tests.conftest import ROOT

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
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.3)
    raise AssertionError("timed out waiting")


def test_make_run_serves_healthz_and_admin_within_a_minute_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    env = {**os.environ, "FERMIX_HOME": str(tmp_path), "FERMIX_PORT": str(port)}
    for name in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "FERMIX_SECRET_KEY"):
        env.pop(name, None)
    server = subprocess.Popen(["make", "-s", "run"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        body = wait_for(lambda: (r := httpx.get(f"{base}/healthz")).json()["worker"]["state"] == "alive" and r.json())
        login = httpx.get(f"{base}/admin/login/")
        assert body["database"] == {"ok": True, "vendor": "sqlite"}
        assert login.status_code == 200 and "csrfmiddlewaretoken" in login.text
        assert httpx.get(f"{base}/static/admin/css/base.css").status_code == 200
    finally:
        os.killpg(server.pid, signal.SIGINT)
        output, _ = server.communicate(timeout=40)
    password = (tmp_path / "admin-password.txt").read_text().strip()
    assert f"Password: {password}" in output
    assert (tmp_path / "admin-password.txt").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "memory.db").exists() and (tmp_path / "bootstrap" / "main" / "SOUL.md").exists()
    assert "Ctrl-C stops it" in output

    # A second run keeps the admin user and its password, and prints no new one.
    again = subprocess.run(["make", "-s", "run"], cwd=ROOT, env={**env, "FERMIX_PORT": "0"},
                           capture_output=True, text=True, timeout=120)
    assert "Password:" not in again.stdout
    assert (tmp_path / "admin-password.txt").read_text().strip() == password
