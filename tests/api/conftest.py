"""Named API callers (an operator, a bot, a bot that may speak for the owner, a bot restricted to another
agent) over Django's test client."""

from __future__ import annotations

import json

import pytest

from api.services import apikey_create
from resources.bootstrap import bootstrap_seed
from tests.api.model_script import Script
from tests.fakeprovider import provider_config_toml, use_config

BASE = "/api/v1"


class Caller:
    """One API key; `post`, `get`, … send JSON to /api/v1 and return the response."""

    def __init__(self, client, key: str | None):
        self.client, self.key = client, key

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def call(self, method: str, path: str, body=None, **query):
        data = None if body is None else json.dumps(body)
        send = getattr(self.client, method)
        if method in ("get", "delete") and body is None:
            return send(BASE + path, query or None, headers=self.headers())
        url = BASE + path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
        return send(url, data, content_type="application/json", headers=self.headers())

    def get(self, path, **query):
        return self.call("get", path, **query)

    def post(self, path, body=None, **query):
        return self.call("post", path, {} if body is None else body, **query)

    def patch(self, path, body):
        return self.call("patch", path, body)

    def delete(self, path):
        return self.call("delete", path)


@pytest.fixture
def keys(db):
    """Full keys by persona: operator, channel (every agent), owner_bot (a channel key created with
    `--may-assert-operator`: it may send `"trust": "operator"`), other (a channel key for agent `other`)."""
    return {
        "operator": apikey_create(name="ops", role="operator")[1],
        "channel": apikey_create(name="bot", role="channel")[1],
        "owner_bot": apikey_create(name="owner-bot", role="channel", may_assert_operator=True)[1],
        "other": apikey_create(name="other-bot", role="channel", agents=["other"])[1],
    }


@pytest.fixture
def operator(client, keys):
    return Caller(client, keys["operator"])


@pytest.fixture
def bot(client, keys):
    return Caller(client, keys["channel"])


@pytest.fixture
def owner_bot(client, keys):
    return Caller(client, keys["owner_bot"])


@pytest.fixture
def other_bot(client, keys):
    return Caller(client, keys["other"])


@pytest.fixture
def anonymous(client):
    return Caller(client, None)


def error_of(response) -> tuple[int, str]:
    """(status, error code) of an error response, asserting the one JSON error shape."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["message"], body
    return response.status_code, body["error"]["code"]


@pytest.fixture
def script(home, fake_provider):
    """A scripted model (tests.api.model_script) behind the provider chain, SOUL.md and the rest seeded."""
    bootstrap_seed(agent_id="main")
    script = Script()
    fake_provider.responder = script
    with use_config(provider_config_toml(fake_provider, context_window=8192)):
        yield script
