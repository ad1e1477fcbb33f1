"""A turn through the real server, when a tool the model calls fails: the model hears it, the bot gets the reply."""

import json
import sqlite3

import pytest

from tests.fakeprovider import Reply, provider_config_toml, tool_call

pytestmark = [pytest.mark.slow, pytest.mark.live]

CONV = "/api/v1/agents/main/conversations/telegram:9"


def test_a_tool_the_database_refuses_is_told_to_the_model_and_the_turn_answers_200(fermix_server, fake_provider):
    fake_provider.push(tool_call("memory_store", {"key": "tea", "value": "likes green tea"}),
                       Reply(text="I could not note that down just now."))
    server = fermix_server(config=provider_config_toml(fake_provider))
    with sqlite3.connect(server.home / "memory.db") as db:  # the database itself refuses the tool's row
        db.execute("CREATE TRIGGER refuse_tea BEFORE INSERT ON memories WHEN NEW.key = 'tea' "
                   "BEGIN SELECT RAISE(ABORT, 'row refused'); END")
    with server.client(server.key("bot", "channel")) as client:
        answer = client.post(CONV + "/turns", json={"content": "I like green tea"})
        stored = client.get(CONV + "/messages").json()["messages"]
    assert answer.status_code == 200, answer.text
    assert answer.json()["reply"] == "I could not note that down just now."
    told = json.loads(fake_provider.requests[1].body["messages"][-1]["content"])
    assert (told["ok"], told["data"]) == (False, {"error": "internal_error"})
    assert [(m["role"], m["content"]) for m in stored] == [("user", "I like green tea"),
                                                          ("assistant", "I could not note that down just now.")]
    assert stored[-1]["metadata"]["tool_calls"] == [{"name": "memory_store", "ok": False, "code": "internal_error"}]
    with sqlite3.connect(server.home / "memory.db") as db:
        assert db.execute("SELECT count(*) FROM memories WHERE key = 'tea'").fetchone() == (0,)
