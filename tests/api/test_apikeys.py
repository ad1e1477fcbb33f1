"""API keys: created once by command (only the hash is kept), revoked by name, checked in constant time."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from api.models import ApiKey
from tests.personas import Caller, error_of

pytestmark = pytest.mark.django_db


def create(*args) -> str:
    out = StringIO()
    call_command("apikey_create", *args, stdout=out)
    return out.getvalue()


def test_apikey_create_prints_only_the_key_and_stores_only_its_hash(home):
    printed = create("--name", "telegram-bot", "--role", "channel", "--agent", "main", "--agent", "work")
    key = printed.strip()
    assert printed == key + "\n" and key.startswith("fmx_") and len(key) > 40
    row = ApiKey.objects.get(name="telegram-bot")
    assert (row.role, row.agents, row.prefix) == ("channel", ["main", "work"], key[:12])
    assert row.key_hash == ApiKey.hash(key) and key not in (row.key_hash, row.prefix, str(row.agents))


def test_a_channel_key_made_with_may_assert_operator_may_speak_for_the_owner(home, client):
    plain = Caller(client, create("--name", "group-bot", "--role", "channel").strip())
    vouching = Caller(client, create("--name", "dm-bot", "--role", "channel", "--may-assert-operator").strip())
    assert ApiKey.objects.get(name="dm-bot").may_assert_operator is True
    assert ApiKey.objects.get(name="group-bot").may_assert_operator is False
    message = {"role": "user", "content": "I am the owner", "trust": "operator"}
    assert error_of(plain.post("/agents/main/conversations/telegram:1/messages", message)) == (
        403, "trust_not_allowed")
    assert vouching.post("/agents/main/conversations/telegram:1/messages", message).status_code == 201
    with pytest.raises(CommandError, match="only a channel key"):
        create("--name", "ops", "--role", "operator", "--may-assert-operator")


@pytest.mark.parametrize("args, message", [
    (["--name", "dup", "--role", "operator"], "already exists"),
    (["--name", "x", "--role", "operator", "--agent", "../etc"], "invalid"),
    (["--name", "   ", "--role", "operator"], "1-100 characters"),
])
def test_apikey_create_refuses_bad_input(home, args, message):
    create("--name", "dup", "--role", "channel")
    with pytest.raises(CommandError, match=message):
        create(*args)


def test_apikey_create_needs_a_known_role(home):
    with pytest.raises(CommandError):
        create("--name", "x", "--role", "admin")


def test_a_revoked_key_stops_working_at_once(home, client):
    caller = Caller(client, create("--name", "bot", "--role", "channel").strip())
    assert caller.get("/agents/main/memories").status_code == 200
    out = StringIO()
    call_command("apikey_revoke", "bot", stdout=out)
    assert out.getvalue() == "Revoked API key 'bot' (channel).\n"
    assert error_of(caller.get("/agents/main/memories")) == (401, "revoked_key")
    with pytest.raises(CommandError, match="already revoked"):
        call_command("apikey_revoke", "bot")
    with pytest.raises(CommandError, match="no API key named"):
        call_command("apikey_revoke", "nobody")


@pytest.mark.parametrize("header", ["Token abc", "Bearer", "Bearer ", "Basic Zm9vOmJhcg==", "Bearer fmx_short",
                                    "Bearer " + "x" * 5000, "Bearer fmx_é"])
def test_a_malformed_or_unknown_key_is_a_401(home, client, header):
    response = client.get("/api/v1/agents/main/memories", headers={"Authorization": header})
    assert error_of(response) == (401, "invalid_key")


def test_a_key_with_the_right_prefix_but_the_wrong_rest_is_refused(home, client):
    key = create("--name", "bot", "--role", "operator").strip()
    forged = key[:12] + ("A" if key[12] != "A" else "B") + key[13:]
    assert error_of(Caller(client, forged).get("/agents/main/memories")) == (401, "invalid_key")


def test_last_used_is_recorded_without_a_write_on_every_request(home, client):
    caller = Caller(client, create("--name", "bot", "--role", "channel").strip())
    assert ApiKey.objects.get(name="bot").last_used_at is None
    caller.get("/agents/main/memories")
    first = ApiKey.objects.get(name="bot").last_used_at
    caller.get("/agents/main/memories")
    assert first is not None and ApiKey.objects.get(name="bot").last_used_at == first
