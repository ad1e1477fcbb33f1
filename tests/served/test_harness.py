"""The live-server harness itself: it starts the stack as `make run` does and stops it."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.live]


def test_it_serves_healthz_and_authenticates_keys_made_by_apikey_create(fermix_server):
    server = fermix_server()
    key = server.key("bot", "channel")
    with server.client(key) as client:
        assert client.get("/api/v1/agents/main/memories").status_code == 200
    with server.client("fmx_unknown") as client:
        assert client.get("/api/v1/agents/main/memories").status_code == 401
