"""Memories over HTTP through the real server: who may read, add and correct a row, and the conversation list."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.live]


def test_memories_over_http_answer_each_caller_as_the_contract_says(shared_server):
    ops = shared_server.client(shared_server.operator)
    bot = shared_server.client(shared_server.key("memories-bot", "channel", "--may-assert-operator"))
    stranger = shared_server.client(shared_server.key("memories-other", "channel", "--agent", "other"))
    anonymous = shared_server.client()
    fact = {"key": "home_city", "value": "lives in Lisbon", "category": "identity", "reason": "the owner said so"}

    assert anonymous.post("/api/v1/agents/main/memories", json=fact).status_code == 401
    refused = bot.post("/api/v1/agents/main/memories", json={**fact, "trust": "operator"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "operator_key_required")
    added = ops.post("/api/v1/agents/main/memories", json=fact)
    assert added.status_code == 201 and added.json()["rendered_in"] == ["USER.md"]
    row = added.json()["memory"]["id"]
    assert "- lives in Lisbon" in (shared_server.home / "memory/main/USER.md").read_text()

    corrected = ops.patch(f"/api/v1/memories/{row}", json={"value": "lives in Porto", "reason": "moved"})
    assert corrected.status_code == 200 and corrected.json()["memory"]["value"] == "lives in Porto"
    assert bot.patch(f"/api/v1/memories/{row}", json={"value": "x", "reason": "r"}).status_code == 403
    assert ops.patch(f"/api/v1/memories/{row}", content=b"[1]",
                     headers={"Content-Type": "application/json"}).json()["error"]["code"] == "body_not_object"

    read = bot.get(f"/api/v1/memories/{row}")
    assert read.status_code == 200
    assert [e["action"] for e in read.json()["history"]] == ["add", "replace"]
    assert stranger.get(f"/api/v1/memories/{row}").status_code == 403
    assert bot.get("/api/v1/memories/0").status_code == 404

    bot.post("/api/v1/agents/main/conversations/telegram:5/messages", json={"role": "user", "content": "hi"})
    listed = bot.get("/api/v1/agents/main/conversations", params={"limit": 1})
    assert listed.status_code == 200 and listed.json()["conversations"][0]["conversation"] == "telegram:5:root"
    assert bot.get("/api/v1/agents/main/conversations", params={"cursor": "x"}).status_code == 400
    assert stranger.get("/api/v1/agents/main/conversations").status_code == 403
