"""The MCP server at /mcp/ through the real server, spoken to by the MCP SDK's own client: the handshake,
the tools and the resources; the key's agents and the connection's trust as on the HTTP tools; and
whatever a client sends, an answer that is not a 500."""

from __future__ import annotations

import asyncio
import itertools

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from memory.tool_definitions import definitions

pytestmark = [pytest.mark.slow, pytest.mark.live]

HERE = "desktop:me"
GROUP = "telegram:-100200"  # a group chat where a guest speaks
NAMES = itertools.count()


@pytest.fixture(scope="module")
def shared_server(shared_server):
    shared_server.manage("fermix_setup", "--noinput")  # as `make run` does: SOUL.md and the other files seeded
    return shared_server


def key(server, role="channel", *flags):
    return server.key(f"mcp-{next(NAMES)}", role, *flags)


def session(server, api_key, *, trust=None, mode="auto", work=None):
    """Run `work(client)` in a session of the SDK's client with this key (and `Fermix-Trust`), return its answer."""
    headers = {"Authorization": f"Bearer {api_key}", **({"Fermix-Trust": trust} if trust else {})}

    async def run():
        http = create_mcp_http_client(headers=headers)
        async with http, Client(streamable_http_client(server.base + "/mcp/", http_client=http), mode=mode,
                                cache=None) as client:
            return await work(client)

    return asyncio.run(run())


async def call(client, name, conversation=HERE, **arguments):
    result = await client.call_tool(name, {"agent": "main", "conversation": conversation, **arguments})
    assert result.structured_content["ok"] is (not result.is_error)
    return result.structured_content


def refusal(client, uri):
    async def read():
        with pytest.raises(MCPError) as raised:
            await client.read_resource(uri)
        return raised.value.data["error"]
    return read()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdk_client_initialises_lists_and_calls_every_tool(shared_server, mode):
    """`legacy` is the initialize handshake (2025 protocol versions); `auto` the client's own choice."""
    owner = key(shared_server, "operator")

    async def work(client):
        listed = (await client.list_tools()).tools
        assert [t.model_dump(by_alias=True, exclude_none=True) for t in listed] == definitions("mcp")
        stored = await call(client, "memory_store", key=f"city_{mode}", value=f"lives in Lisbon ({mode})",
                            category="identity")
        found = await call(client, "memory_recall", key=f"city_{mode}", scope="owner")
        sources = await call(client, "memory_sources_list")
        forgotten = await call(client, "memory_forget", id=stored["data"]["id"], reason="moved")
        again = await call(client, "memory_recall", key=f"city_{mode}", scope="owner")
        return stored, found, sources, forgotten, again

    stored, found, sources, forgotten, again = session(shared_server, owner, trust="operator", mode=mode, work=work)
    assert (stored["data"]["scope_type"], stored["data"]["category"]) == ("owner", "identity")
    assert [item["id"] for item in found["data"]] == [stored["data"]["id"]]
    assert "conversation:desktop:me:root" in {source["key"] for source in sources["data"]}
    assert forgotten["data"]["archived"] is True and again["data"] == []
    rows = shared_server.client(owner).get("/api/v1/agents/main/memories", params={"archived": "true"}).json()
    assert stored["data"]["id"] in {row["id"] for row in rows["memories"]}


def test_it_reads_each_prompt_file_as_a_resource(shared_server):
    owner = key(shared_server, "operator")
    api = shared_server.client(owner)
    api.post("/api/v1/agents/main/tools/memory_store", json={
        "conversation": HERE, "trust": "operator",
        "arguments": {"key": "job", "value": "works as a translator", "category": "identity"}}).raise_for_status()
    api.post("/api/v1/agents/main/tools/memory_store", json={
        "conversation": HERE, "trust": "operator",
        "arguments": {"key": "project", "value": "the atlas translation is due in May", "category": "context"}}
    ).raise_for_status()

    async def work(client):
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        texts = {}
        for name in ("USER.md", "MEMORY.md", "SOUL.md"):
            [content] = (await client.read_resource(f"fermix://main/{name}")).contents
            texts[name] = (content.mime_type, content.text)
        return listed, templates, texts

    listed, templates, texts = session(shared_server, owner, trust="operator", work=work)
    assert {"fermix://main/USER.md", "fermix://main/MEMORY.md", "fermix://main/SOUL.md"} <= listed
    assert templates == {"fermix://{agent}/USER.md", "fermix://{agent}/MEMORY.md", "fermix://{agent}/SOUL.md"}
    assert "- works as a translator" in texts["USER.md"][1]
    assert "atlas translation" in texts["MEMORY.md"][1]
    soul = next(r for r in api.get("/api/v1/agents/main/resources").json()["resources"]
                if r["resource_type"] == "soul_md")
    current = api.get(f"/api/v1/agents/main/resources/soul_md/revisions/{soul['current_revision']}").json()
    assert texts["SOUL.md"][1] == current["content"] and current["content"].strip()
    assert {mime for mime, _ in texts.values()} == {"text/markdown"}


def test_a_key_restricted_to_another_agent_is_refused(shared_server):
    other = key(shared_server, "channel", "--agent", "other")

    async def work(client):
        stored = await call(client, "memory_store", key="x", value="a note")
        return stored, await refusal(client, "fermix://main/SOUL.md"), (await client.list_resources()).resources

    stored, read, listed = session(shared_server, other, work=work)
    assert stored["data"]["error"] == "agent_not_allowed"
    assert read == "agent_not_allowed"
    assert {str(r.uri) for r in listed} == {"fermix://other/SOUL.md"}


def test_a_guest_connection_stays_in_its_conversation(shared_server):
    owner, guest = key(shared_server, "operator"), key(shared_server, "channel")
    home = shared_server.client(owner).post("/api/v1/agents/main/tools/memory_store", json={
        "conversation": "telegram:1", "trust": "operator",
        "arguments": {"key": "home", "value": "lives in Porto", "category": "identity"}}).json()["data"]

    async def work(client):
        return {
            "note": await call(client, "memory_store", GROUP, key="name", value="is called Mallory",
                               category="identity"),
            "owner": await call(client, "memory_recall", GROUP, query="Porto", scope="owner"),
            "all": await call(client, "memory_recall", GROUP, query="Porto", scope="all"),
            "current": await call(client, "memory_recall", GROUP, query="Porto"),
            "forget": await call(client, "memory_forget", GROUP, id=home["id"]),
            "rewrite": await call(client, "memory_store", GROUP, id=home["id"], value="lives in a cave"),
            "user_md": await refusal(client, "fermix://main/USER.md"),
            "memory_md": await refusal(client, "fermix://main/MEMORY.md"),
            "soul_md": (await client.read_resource("fermix://main/SOUL.md")).contents[0].text,
            "listed": {str(r.uri) for r in (await client.list_resources()).resources},
        }

    seen = session(shared_server, guest, work=work)
    assert (seen["note"]["data"]["scope_type"], seen["note"]["data"]["category"]) == ("conversation", "")
    assert seen["owner"]["data"] == seen["all"]["data"] == {"error": "operator_only"}
    assert seen["current"]["data"] == []
    assert seen["forget"]["data"]["error"] == seen["rewrite"]["data"]["error"] == "out_of_scope"
    assert seen["user_md"] == seen["memory_md"] == "operator_only"
    assert seen["soul_md"] and seen["listed"] == {"fermix://main/SOUL.md"}
    assert "lives in Porto" in (shared_server.home / "memory/main/USER.md").read_text()

    refused = httpx.post(shared_server.base + "/mcp/", json={}, headers={
        "Authorization": f"Bearer {guest}", "Fermix-Trust": "operator"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "trust_not_allowed")
    vouching = key(shared_server, "channel", "--may-assert-operator")
    allowed = session(shared_server, vouching, trust="operator",
                      work=lambda client: client.read_resource("fermix://main/USER.md"))
    assert "lives in Porto" in allowed.contents[0].text


RPC_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def rpc(method, params=None, id=1):
    return {"jsonrpc": "2.0", "id": id, "method": method, **({"params": params} if params is not None else {})}


def test_no_input_is_a_500(shared_server):
    good = {"Authorization": f"Bearer {shared_server.operator}", **RPC_HEADERS}
    url = shared_server.base + "/mcp/"
    cases = {
        "no key": dict(json=rpc("tools/list"), headers=RPC_HEADERS),
        "unknown key": dict(json=rpc("tools/list"), headers={**good, "Authorization": "Bearer fmx_nope"}),
        "trust typo": dict(json=rpc("tools/list"), headers={**good, "Fermix-Trust": "owner"}),
        "not json": dict(content=b"{not json", headers=good),
        "not utf-8": dict(content=b"\xff\xfe", headers=good),
        "an array": dict(json=[1, 2], headers=good),
        "a number": dict(json=5, headers=good),
        "no method": dict(json={"jsonrpc": "2.0", "id": 1}, headers=good),
        "unknown method": dict(json=rpc("tools/explode"), headers=good),
        "unknown tool": dict(json=rpc("tools/call", {"name": "rm_rf", "arguments": {}}), headers=good),
        "arguments a string": dict(json=rpc("tools/call", {"name": "memory_store", "arguments": "x"}), headers=good),
        "no agent": dict(json=rpc("tools/call", {"name": "memory_recall", "arguments": {"query": "x"}}),
                         headers=good),
        "bad agent": dict(json=rpc("tools/call", {"name": "memory_recall", "arguments": {
            "agent": "../etc", "conversation": HERE, "query": "x"}}), headers=good),
        "bad conversation": dict(json=rpc("tools/call", {"name": "memory_recall", "arguments": {
            "agent": "main", "conversation": "no channel", "query": "x"}}), headers=good),
        "id not a number": dict(json=rpc("tools/call", {"name": "memory_forget", "arguments": {
            "agent": "main", "conversation": HERE, "id": "seven"}}), headers=good),
        "NUL in a value": dict(json=rpc("tools/call", {"name": "memory_store", "arguments": {
            "agent": "main", "conversation": HERE, "key": "k", "value": "a\x00b"}}), headers=good),
        "query too long": dict(json=rpc("tools/call", {"name": "memory_recall", "arguments": {
            "agent": "main", "conversation": HERE, "query": "x" * 1001}}), headers=good),
        "a body of quoted phrases": dict(json=rpc("tools/call", {"name": "memory_recall", "arguments": {
            "agent": "main", "conversation": HERE, "source": "history",
            "query": '"a b" ' * 100_000}}), headers=good),  # 800 KB as JSON, under the body limit
        "bad uri": dict(json=rpc("resources/read", {"uri": "file:///etc/passwd"}), headers=good),
        "unknown file": dict(json=rpc("resources/read", {"uri": "fermix://main/SECRETS.md"}), headers=good),
        "unknown agent's file": dict(json=rpc("resources/read", {"uri": "fermix://nobody/SOUL.md"}), headers=good),
        "uri not text": dict(json=rpc("resources/read", {"uri": 7}), headers=good),
        "too large": dict(content=b"{" + b" " * (1024 * 1024 + 1) + b"}", headers=good),
        "unknown protocol version": dict(json=rpc("tools/list"), headers={**good, "MCP-Protocol-Version": "1999"}),
        "modern, no envelope": dict(json=rpc("tools/list"), headers={**good, "MCP-Protocol-Version": "2026-07-28"}),
        "no Accept": dict(json=rpc("tools/list"), headers={k: v for k, v in good.items() if k != "Accept"}),
        "text/plain": dict(content=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
                           headers={**good, "Content-Type": "text/plain"}),
        "a batch": dict(json=[rpc("tools/list"), rpc("resources/list", id=2)], headers=good),
    }
    answers = {name: httpx.post(url, timeout=30, **case) for name, case in cases.items()}
    answers["GET"] = httpx.get(url, headers=good, timeout=30)
    answers["DELETE"] = httpx.delete(url, headers=good, timeout=30)
    for name, answer in answers.items():
        assert answer.status_code < 500, (name, answer.status_code, answer.text)
        assert answer.headers["content-type"].startswith("application/json"), (name, answer.text)
        answer.json()
    assert answers["no key"].status_code == 401 and answers["no key"].json()["error"]["code"] == "missing_key"
    assert answers["trust typo"].json()["error"]["code"] == "invalid_trust"
    assert answers["too large"].status_code == 413
    for name in ("query too long", "a body of quoted phrases"):  # refused before any search, not run for seconds
        assert answers[name].json()["result"]["structuredContent"]["data"] == {"error": "invalid_argument"}, name
    for name in ("no agent", "bad agent", "bad conversation", "id not a number", "NUL in a value"):
        result = answers[name].json()["result"]
        assert result["isError"] is True and result["structuredContent"]["ok"] is False, (name, result)
    assert answers["bad agent"].json()["result"]["structuredContent"]["data"]["error"] == "invalid_agent"
    assert answers["unknown tool"].json()["error"]["data"] == {"error": "unknown_tool"}
    assert [answers[m].status_code for m in ("GET", "DELETE")] == [405, 405]
    for name in ("bad uri", "unknown file", "unknown agent's file"):
        assert "error" in answers[name].json(), name
