"""Slow and idle clients, and turns waiting on a slow model, do not stall the real server."""

import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from fermix_site.serving import READ_TIMEOUT
from tests.fakeprovider import Reply, provider_config_toml
from tests.live import status_and_json

pytestmark = [pytest.mark.slow, pytest.mark.live]

IDLE, TURNS = 50, 10
MODEL_DELAY = 5
MESSAGES = "/api/v1/agents/main/conversations/telegram:{}/messages"


def open_idle(port: int, index: int) -> socket.socket:
    """Half the connections send nothing; the other half stop half way through their headers."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    if index % 2:
        sock.sendall(b"POST /api/v1/agents/main/conversations/telegram:9/messages HTTP/1.1\r\nHost: 127.0")
    return sock


def test_idle_connections_and_slow_turns_leave_appends_and_healthz_answering(fermix_server, fake_provider):
    together = threading.Barrier(TURNS, timeout=60)

    def model(request):
        together.wait()  # every turn is waiting on the model at the same time, or this breaks
        return Reply(text="slow answer", delay=MODEL_DELAY)

    fake_provider.responder = model
    server = fermix_server(config=provider_config_toml(fake_provider))
    key = server.key("bot", "operator")
    idle = [open_idle(server.port, i) for i in range(IDLE)]
    try:
        with server.client(key, timeout=120) as client, ThreadPoolExecutor(TURNS) as pool:
            turns = [pool.submit(client.post, MESSAGES.format(f"turn{i}").replace("messages", "turns"),
                                 json={"content": f"question {i}"}) for i in range(TURNS)]
            while len(fake_provider.requests) < TURNS and not any(t.done() for t in turns):
                threading.Event().wait(0.05)
            # Now 50 connections are idle or half-sent and 10 turns wait on the model.
            with server.client(key, timeout=READ_TIMEOUT) as quick:
                assert quick.get("/healthz").status_code == 200
                appended = [quick.post(MESSAGES.format("busy"), json={"role": "user", "content": f"m{i}"})
                            for i in range(5)]
            assert [a.status_code for a in appended] == [201] * 5
            answers = [t.result() for t in turns]
        assert [a.status_code for a in answers] == [200] * TURNS
        assert {a.json()["reply"] for a in answers} == {"slow answer"}
    finally:
        for sock in idle:
            sock.close()


def test_a_client_that_stops_half_way_is_answered_408_and_frees_its_thread(fermix_server):
    server = fermix_server(web_workers=1)
    key = server.key("bot", "operator")
    head = (f"POST {MESSAGES.format(1)} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n").encode()
    status, body = status_and_json(server.raw(head + b'{"role": "us', timeout=READ_TIMEOUT * 3))
    assert (status, body["error"]["code"]) == (408, "request_timeout")
    status, body = status_and_json(server.raw(b"GET /healthz HTTP/1.1\r\nHost: 127.0", timeout=READ_TIMEOUT * 3))
    assert (status, body["error"]["code"]) == (408, "request_timeout")
    with server.client(key) as client:  # nothing half-written
        assert client.get(MESSAGES.format(1)).json()["messages"] == []


def test_a_turn_past_its_budget_answers_504_and_keeps_the_message(fermix_server, fake_provider):
    fake_provider.responder = lambda request: Reply(text="too late", delay=MODEL_DELAY)
    server = fermix_server(config=provider_config_toml(fake_provider) + "\n[fermix_core.timeouts]\nturn_ms = 1500\n")
    key = server.key("bot", "operator")
    with server.client(key) as client:
        answer = client.post(MESSAGES.format(5).replace("messages", "turns"), json={"content": "are you there?"})
        assert answer.status_code == 504
        assert answer.json()["error"]["code"] == "turn_timeout"
        window = client.get(MESSAGES.format(5)).json()["messages"]
    assert [(m["role"], m["content"]) for m in window] == [("user", "are you there?")]
