"""Who talks to Fermix in the tests: the owner and guests in a conversation, the model (the fake provider),
the API's callers by key, the console's staff. Every row is made through the services.

A pytest plugin (tests/conftest.py loads it), so its fixtures serve every test; a test module binds its
own conversation with `functools.partial(say, conversation=...)`.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from api.services import apikey_create
from memory.conversations import message_append
from memory.models import Message
from tests.fakeprovider import Reply, provider_config_toml, use_config

AGENT = "main"
CONV = "telegram:42"
BASE = "/api/v1"


def say(text: str, *, conversation: str = CONV, trust: str = "operator", role: str = "user", kind: str = "chat",
        **fields) -> Message:
    """`text` appended to the conversation, by the owner (operator trust) unless `trust` says otherwise."""
    return message_append(agent_id=AGENT, conversation=conversation, role=role, content=text, trust=trust,
                          kind=kind, **fields)


def ops(*operations) -> Reply:
    """The reviewer model's answer proposing `operations`."""
    return Reply(text=json.dumps({"operations": list(operations)}))


@pytest.fixture
def model(home, fake_provider):
    """The fake provider as the only model. `model.configure(extra, **provider)` gives the config to put in
    force for a block instead: `extra` TOML after the provider's table, built with `provider` options."""
    def configure(extra="", **provider):
        return use_config(provider_config_toml(fake_provider, **provider) + "\n" + extra)

    with configure():
        fake_provider.configure = configure
        yield fake_provider


class Caller:
    """One API key (none for anonymous); `post`, `get`, … send JSON to /api/v1 and return the response.
    `idem` sends it as the Idempotency-Key."""

    def __init__(self, client, key: str | None):
        self.client, self.key = client, key

    def headers(self, idem: str | None = None) -> dict:
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        if idem is not None:
            headers["Idempotency-Key"] = idem
        return headers

    def call(self, method: str, path: str, body=None, idem: str | None = None, **query):
        data = None if body is None else json.dumps(body)
        send = getattr(self.client, method)
        if method in ("get", "delete") and body is None:
            return send(BASE + path, query or None, headers=self.headers(idem))
        url = BASE + path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
        return send(url, data, content_type="application/json", headers=self.headers(idem))

    def get(self, path, **query):
        return self.call("get", path, **query)

    def post(self, path, body=None, idem=None, **query):
        return self.call("post", path, {} if body is None else body, idem, **query)

    def patch(self, path, body):
        return self.call("patch", path, body)

    def delete(self, path):
        return self.call("delete", path)

    def say(self, content, idem=None, *, conversation=CONV, role="user", **fields):
        """Append a message to the conversation's window."""
        return self.post(f"/agents/{AGENT}/conversations/{conversation}/messages",
                         {"role": role, "content": content, **fields}, idem)

    def turn(self, content, idem=None, *, conversation=CONV, **fields):
        """Run a turn in the conversation."""
        return self.post(f"/agents/{AGENT}/conversations/{conversation}/turns", {"content": content, **fields}, idem)


def error_of(response) -> tuple[int, str]:
    """(status, error code) of an error response, asserting the one JSON error shape."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["message"], body
    return response.status_code, body["error"]["code"]


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


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_superuser("operator", "op@example.com", "operator-password-1")


@pytest.fixture
def viewer(db):
    """Staff without superuser rights: may look, may not change settings."""
    return get_user_model().objects.create_user("viewer", "v@example.com", "viewer-password-1", is_staff=True)


@pytest.fixture
def console(client, staff):
    client.force_login(staff)
    return client
