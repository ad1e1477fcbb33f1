"""Retries through the real server after it was killed between a commit and its answer: nothing stored twice."""

import os
import signal
import sqlite3
import threading
import time
import uuid

import httpx
import pytest

from tests.fakeprovider import Reply, provider_config_toml
from tests.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.live]

CONV = "/api/v1/agents/main/conversations/telegram:7"


def rows(server, sql, params=()):
    with sqlite3.connect(server.home / "memory.db", timeout=20) as conn:
        return conn.execute(sql, params).fetchall()


def test_a_turn_killed_while_the_model_thinks_is_resumed_by_its_retry_and_stored_once(fermix_server, fake_provider):
    fake_provider.push(Reply(text="never delivered", delay=5))
    server = fermix_server(config=provider_config_toml(fake_provider))
    key = server.key("bot", "channel")
    body, headers = {"content": "Do you remember my tea?"}, {"Idempotency-Key": "turn-1"}
    first = {}

    def send():
        try:
            first["answer"] = server.client(key).post(CONV + "/turns", json=body, headers=headers)
        except httpx.HTTPError as exc:
            first["error"] = exc

    sender = threading.Thread(target=send)
    sender.start()
    wait_for(lambda: fake_provider.requests)  # the user message is committed: it is stored before the model call
    assert rows(server, "SELECT state FROM api_idempotency_records") == [("running",)]
    server.kill()
    sender.join(timeout=30)
    assert "error" in first  # the bot saw the connection drop and never got an answer

    server.start()
    fake_provider.push(Reply(text="Yes: green tea."))
    with server.client(key) as client:
        resumed = client.post(CONV + "/turns", json=body, headers=headers)
        replay = client.post(CONV + "/turns", json=body, headers=headers)
    assert resumed.status_code == 200 and resumed.json()["reply"] == "Yes: green tea."
    assert "Idempotent-Replay" not in resumed.headers
    assert replay.status_code == 200 and replay.headers["Idempotent-Replay"] == "true"
    assert replay.json() == resumed.json()
    assert rows(server, "SELECT role, content FROM messages ORDER BY id") == [
        ("user", "Do you remember my tea?"), ("assistant", "Yes: green tea.")]


class Burst:
    """Bots appending with a fresh Idempotency-Key each, until the server goes away."""

    def __init__(self, server, key, workers=12):
        self.server, self.key = server, key
        self.sent, self.answered, self.pending = {}, {}, set()
        self.threads = [threading.Thread(target=self._send) for _ in range(workers)]
        for thread in self.threads:
            thread.start()

    def _send(self):
        with self.server.client(self.key, timeout=10) as client:
            while True:
                idem = uuid.uuid4().hex
                self.sent[idem] = f"burst {idem}"
                self.pending.add(idem)
                try:
                    response = client.post(CONV + "/messages", json={"role": "user", "content": self.sent[idem]},
                                           headers={"Idempotency-Key": idem})
                except httpx.HTTPError:
                    return  # the server is gone; the retry decides this request's fate
                self.answered[idem] = response.json()["id"]
                self.pending.discard(idem)

    def join(self):
        for thread in self.threads:
            thread.join(timeout=30)


def _freeze_after_a_commit(server, burst, attempts=300) -> set:
    """Stop the server (SIGSTOP) at moments until a request still waiting for its answer is committed."""
    for attempt in range(attempts):
        time.sleep(0.002 * (1 + attempt % 7))
        os.killpg(server.process.pid, signal.SIGSTOP)
        time.sleep(0.2)  # answers already sent reach their bots; what is still pending was never answered
        waiting = {burst.sent[idem]: idem for idem in list(burst.pending)}
        marks = ",".join("?" * len(waiting))
        committed = {waiting[content] for (content,) in rows(
            server, f"SELECT content FROM messages WHERE content IN ({marks})", list(waiting))} if waiting else set()
        if committed:
            return committed
        os.killpg(server.process.pid, signal.SIGCONT)
    raise AssertionError(f"no request was caught between its commit and its answer in {attempts} tries")


def test_appends_killed_between_commit_and_answer_are_stored_once_when_retried(fermix_server):
    server = fermix_server()
    key = server.key("bot", "channel")
    burst = Burst(server, key)
    time.sleep(0.5)
    caught = _freeze_after_a_commit(server, burst)
    server.kill()
    burst.join()
    swallowed = caught - set(burst.answered)
    assert swallowed, "every caught request got its answer before the kill"

    server.start()
    with server.client(key) as client:
        for idem, content in burst.sent.items():
            again = client.post(CONV + "/messages", json={"role": "user", "content": content},
                                headers={"Idempotency-Key": idem})
            assert again.status_code in (200, 201), again.text
            if idem in burst.answered or idem in swallowed:
                assert again.status_code == 200 and again.headers["Idempotent-Replay"] == "true"
            if idem in burst.answered:
                assert again.json()["id"] == burst.answered[idem]
            burst.answered[idem] = again.json()["id"]
    stored = dict(rows(server, "SELECT content, id FROM messages"))
    assert len(stored) == len(rows(server, "SELECT id FROM messages")) == len(burst.sent)
    assert all(stored[content] == burst.answered[idem] for idem, content in burst.sent.items())
