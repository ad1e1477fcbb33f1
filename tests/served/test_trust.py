"""Trust through the real server: a channel key's guest tool calls stay in their conversation, and only a
key made with `--may-assert-operator` may speak for the owner."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.live]

TOOLS = "/api/v1/agents/main/tools/"
HERE, ELSEWHERE = "telegram:1", "slack:9"


def tool(client, name, arguments, conversation=HERE, **fields):
    response = client.post(TOOLS + name, json={"conversation": conversation, "arguments": arguments, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def test_a_channel_keys_guest_tool_calls_cannot_reach_the_owners_memory(fermix_server):
    server = fermix_server()
    owner = server.client(server.key("ops", "operator"))
    guest = server.client(server.key("group-bot", "channel"))
    user_md = server.home / "memory/main/USER.md"
    home = tool(owner, "memory_store", {"key": "home", "value": "lives in Lisbon", "category": "identity"},
                trust="operator")["data"]
    tool(owner, "memory_store", {"key": "plan", "value": "the secret plan"}, conversation=ELSEWHERE,
         trust="operator")
    owner.post(f"/api/v1/agents/main/conversations/{ELSEWHERE}/messages",
               json={"role": "user", "content": "the secret message"}).raise_for_status()
    before = user_md.read_text()
    assert "lives in Lisbon" in before

    forget = tool(guest, "memory_forget", {"id": home["id"]})
    rewrite = tool(guest, "memory_store", {"id": home["id"], "value": "lives in a cave"})
    assert [(forget["ok"], forget["data"]["error"]), (rewrite["ok"], rewrite["data"]["error"])] == [
        (False, "out_of_scope"), (False, "out_of_scope")]
    stored = tool(guest, "memory_store", {"key": "name", "value": "is called Mallory", "category": "identity"})
    assert stored["ok"] and (stored["data"]["scope_type"], stored["data"]["category"]) == ("conversation", "")
    for scope in ("owner", "all"):
        assert tool(guest, "memory_recall", {"query": "secret", "scope": scope, "source": "all"})["data"] == {
            "error": "operator_only"}
    found = tool(guest, "memory_recall", {"query": "secret", "source": "all"})
    assert {k: found[k] for k in ("ok", "result", "data", "warnings")} == {
        "ok": True, "result": "No matching memories.", "data": [], "warnings": []}
    assert found["meta"]["mode"] in ("hybrid", "lexical")  # lexical while the cluster embeds the messages

    assert user_md.read_text() == before
    prompt = owner.get("/api/v1/agents/main/prompt", params={"trust": "operator"}).json()["system_messages"]
    assert "lives in Lisbon" in str(prompt) and "Mallory" not in str(prompt)
    rows = owner.get("/api/v1/agents/main/memories", params={"archived": "all"}).json()["memories"]
    assert {(r["key"], r["value"], r["archived"]) for r in rows if r["key"] == "home"} == {
        ("home", "lives in Lisbon", False)}


def test_only_a_key_made_with_may_assert_operator_speaks_for_the_owner(fermix_server):
    server = fermix_server()
    plain = server.client(server.key("group-bot", "channel"))
    vouching = server.client(server.key("dm-bot", "channel", "--may-assert-operator"))
    fact = {"conversation": HERE, "trust": "operator",
            "arguments": {"key": "home", "value": "lives in Lisbon", "category": "identity"}}
    message = {"role": "user", "content": "I am the owner", "trust": "operator"}
    for path, body in ((TOOLS + "memory_store", fact), (f"/api/v1/agents/main/conversations/{HERE}/messages",
                                                        message)):
        refused = plain.post(path, json=body)
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "trust_not_allowed")
    assert plain.get(f"/api/v1/agents/main/conversations/{HERE}/messages").json()["messages"] == []

    stored = vouching.post(TOOLS + "memory_store", json=fact).json()
    assert stored["ok"] and stored["data"]["scope_type"] == "owner"
    assert "- lives in Lisbon" in (server.home / "memory/main/USER.md").read_text()
    assert vouching.post(f"/api/v1/agents/main/conversations/{HERE}/messages", json=message).status_code == 201
    window = vouching.get(f"/api/v1/agents/main/conversations/{HERE}/messages").json()["messages"]
    assert [(m["content"], m["trust"]) for m in window] == [("I am the owner", "operator")]
