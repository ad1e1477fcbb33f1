"""The web server killed mid-request: what was acknowledged is kept, nothing is half-written, it comes back."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from bench.django_env import free_port
from tests.conftest import ROOT
from tests.fakeprovider import FakeProvider, Reply, provider_config_toml

pytestmark = pytest.mark.slow


def serve(env):
    process = subprocess.Popen([sys.executable, "manage.py", "serve"], cwd=ROOT, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{env['FERMIX_PORT']}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                return process, base
        except httpx.HTTPError:
            time.sleep(0.3)
    raise AssertionError("the server did not start")


def test_a_server_killed_mid_turn_keeps_the_stored_message_and_recovers(tmp_path):
    with FakeProvider() as fake:
        (tmp_path / "config.toml").write_text(provider_config_toml(fake))
        env = {**os.environ, "FERMIX_HOME": str(tmp_path), "FERMIX_PORT": str(free_port()),
               "DJANGO_SETTINGS_MODULE": "fermix_site.settings", "FERMIX_LOG_LEVEL": "WARNING"}
        env.pop("DATABASE_URL", None)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        key = subprocess.run([sys.executable, "manage.py", "apikey_create", "--name", "bot", "--role", "operator"],
                             cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout.split()[-1]
        headers = {"Authorization": f"Bearer {key}"}
        turns = "/api/v1/agents/main/conversations/telegram:1/turns"

        process, base = serve(env)
        fake.push(Reply(text="too late", delay=60))
        outcome = {}
        request = threading.Thread(target=lambda: outcome.setdefault("r", _post(base + turns, headers)))
        request.start()
        deadline = time.monotonic() + 30
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fake.requests, "the turn never reached the model"
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        request.join(timeout=30)
        assert isinstance(outcome["r"], httpx.HTTPError)  # the client saw the connection drop

        process, base = serve(env)
        try:
            window = httpx.get(base + "/api/v1/agents/main/conversations/telegram:1/messages", headers=headers).json()
            assert [(m["role"], m["content"]) for m in window["messages"]] == [("user", "I like tea")]
            fake.push(Reply(text="Noted: you like tea."))
            again = httpx.post(base + turns, headers=headers, json={"content": "I like tea", "trust": "operator"},
                               timeout=60)
            assert again.status_code == 200 and again.json()["reply"] == "Noted: you like tea."
            check = subprocess.run([sys.executable, "manage.py", "doctor", "--json"], cwd=ROOT, env=env,
                                   capture_output=True, text=True)
            statuses = {c["name"]: c["status"] for c in json.loads(check.stdout)["checks"]}
            assert statuses["fts_triggers"] == statuses["revision_hashes"] == statuses["wal"] == "ok"
        finally:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=30)


def _post(url, headers):
    try:
        return httpx.post(url, headers=headers, json={"content": "I like tea", "trust": "operator"}, timeout=90)
    except httpx.HTTPError as exc:
        return exc
