"""Through the real server: the prompt of a group chat, and deciding on a waiting directive."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.live]

CONV = "telegram:served-group"
MESSAGES = f"/api/v1/agents/main/conversations/{CONV}/messages"

PROPOSE = """
from memory.rows import memory_propose
row = memory_propose(op="add", agent_id="main", owner_id="default", scope_type="agent", scope_id="main",
                     key="served_rule", value="answer in haiku", category="directive", actor_type="reviewer")
print(row.id)
"""


def test_a_group_chat_prompt_leaves_the_profile_out_and_says_so(shared_server):
    bot = shared_server.client(shared_server.key("group-bot", "channel", "--may-assert-operator"))
    said = bot.post(MESSAGES, json={"role": "user", "content": "hello all", "chat_type": "group", "trust": "operator"})
    assert said.status_code == 201
    prompt = bot.get("/api/v1/agents/main/prompt", params={"conversation": CONV, "trust": "operator"}).json()
    assert prompt["parts"][-1] == "USER.md left out: group chat"
    direct = bot.get("/api/v1/agents/main/prompt", params={"trust": "operator"}).json()
    assert direct["parts"][-1] == "memory-context"
    bad = bot.post(MESSAGES, json={"role": "user", "content": "x", "chat_type": "party"})
    assert bad.status_code == 422 and set(bad.json()) == {"error"}


def test_only_an_operator_key_decides_on_a_waiting_directive(shared_server):
    made = shared_server.manage("shell", "-c", PROPOSE)
    row_id = int(made.stdout.strip().splitlines()[-1])
    operator = shared_server.client(shared_server.key("approval-ops", "operator"))
    bot = shared_server.client(shared_server.key("approval-bot", "channel", "--may-assert-operator"))
    pending = operator.get("/api/v1/agents/main/memories", params={"state": "pending"}).json()["memories"]
    assert [m["id"] for m in pending] == [row_id]
    refused = bot.post(f"/api/v1/memories/{row_id}/approve", json={})
    assert refused.status_code == 403 and set(refused.json()) == {"error"}
    approved = operator.post(f"/api/v1/memories/{row_id}/approve", json={"reason": "fine"})
    assert approved.status_code == 200 and approved.json()["memory"]["state"] == "live"
    again = operator.post(f"/api/v1/memories/{row_id}/reject", json={})
    assert (again.status_code, again.json()["error"]["code"]) == (409, "not_pending")
