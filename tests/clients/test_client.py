"""fermix_client against the real server (`manage.py serve`) with the fake model provider on loopback."""

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fermix_client import (
    AsyncClient,
    Client,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    RetryPolicy,
    TransportError,
    Unauthorized,
)

from tests.clients.proxy import Fault, FlakyProxy
from tests.fakeprovider import Reply, tool_call, unused_port

pytestmark = [pytest.mark.slow, pytest.mark.live]

FAST = RetryPolicy(attempts=4, backoff=0.01, max_backoff=0.05)  # no test waits out a real backoff


def contents(client, conversation):
    return [(m["role"], m["content"]) for m in client.messages(conversation)["messages"]]


def test_a_retried_append_whose_answer_was_lost_is_stored_once(served, conv):
    with FlakyProxy(served.base) as proxy, Client(proxy.url, api_key=served.bot, retry=FAST) as fermix:
        proxy.faults.append(Fault("drop"))
        created = fermix.append(conv, "I drink green tea.", sender="ana")
        assert contents(fermix, conv) == [("user", "I drink green tea.")]
    appends = proxy.requests_to("/messages")
    assert [seen.fault for seen in appends] == ["drop", ""]
    assert appends[0].headers["idempotency-key"] == appends[1].headers["idempotency-key"]
    assert created["id"] == served.client(served.bot).get(
        f"/api/v1/agents/main/conversations/{conv}/messages").json()["messages"][0]["id"]


def test_a_retried_turn_whose_answer_was_lost_runs_the_model_once(served, script, conv):
    script.push("turn", Reply(text="You drink green tea."))
    turns_before = len(script.requests("turn"))

    async def run():
        async with AsyncClient(proxy.url, api_key=served.bot, retry=FAST) as fermix:
            proxy.faults.append(Fault("drop"))
            answer = await fermix.turn(conv, "What do I drink?", sender="ana")
            window = (await fermix.messages(conv))["messages"]
            return answer, [(m["role"], m["content"]) for m in window]

    with FlakyProxy(served.base) as proxy:
        answer, window = asyncio.run(run())
    assert answer["reply"] == "You drink green tea."
    assert window == [("user", "What do I drink?"), ("assistant", "You drink green tea.")]
    assert len(script.requests("turn")) == turns_before + 1
    turns = proxy.requests_to("/turns")
    assert len(turns) == 2 and turns[0].headers["idempotency-key"] == turns[1].headers["idempotency-key"]


def test_a_turn_retried_while_its_first_attempt_still_runs_waits_for_its_answer(served, script, conv):
    script.push("turn", Reply(text="Slow but sure.", delay=3))
    turns_before = len(script.requests("turn"))
    patient = RetryPolicy(attempts=12, backoff=0.5, max_backoff=1.0)
    with Client(served.base, api_key=served.bot, retry=patient, timeout=httpx.Timeout(30, read=1)) as fermix:
        # The first attempt's answer is not awaited (read timeout); the retries meet its claim (409
        # idempotency_in_progress) until it has answered, then get that answer.
        answer = fermix.turn(conv, "Take your time.")
        assert answer["reply"] == "Slow but sure."
        assert contents(fermix, conv) == [("user", "Take your time."), ("assistant", "Slow but sure.")]
    assert len(script.requests("turn")) == turns_before + 1


def test_a_gateways_503_and_a_429_are_retried_with_the_same_key(served, conv):
    with FlakyProxy(served.base) as proxy, Client(proxy.url, api_key=served.bot, retry=FAST) as fermix:
        proxy.faults += [Fault("status", 503), Fault("status", 429, retry_after="0")]
        fermix.append(conv, "hello")
        assert contents(fermix, conv) == [("user", "hello")]
    appends = proxy.requests_to("/messages")
    assert [seen.fault for seen in appends] == ["status", "status", ""]
    assert len({seen.headers["idempotency-key"] for seen in appends}) == 1


def test_two_appends_of_the_same_text_are_two_messages(served, conv):
    # Each logical append has its own key: only retries are deduplicated, not repeated words.
    with Client(served.base, api_key=served.bot) as fermix:
        fermix.append(conv, "ha")
        fermix.append(conv, "ha")
        assert contents(fermix, conv) == [("user", "ha"), ("user", "ha")]


def test_a_write_without_a_key_is_not_sent_again_once_the_server_may_have_acted(served, conv):
    with FlakyProxy(served.base) as proxy, Client(proxy.url, api_key=served.bot, retry=FAST) as fermix:
        proxy.faults.append(Fault("drop"))
        with pytest.raises(TransportError) as raised:
            fermix.commit(conv, peak_prompt_tokens=10)
    assert raised.value.attempts == 1 and len(proxy.requests_to("/commit")) == 1


def test_a_service_that_cannot_be_reached_is_retried_then_reported(conv):
    with Client(f"http://127.0.0.1:{unused_port()}", api_key="k", retry=RetryPolicy(attempts=3, backoff=0.01)) as c:
        with pytest.raises(TransportError) as raised:
            c.commit(conv, peak_prompt_tokens=1)  # never connected, so even a plain write is retried
    assert raised.value.attempts == 3


def test_refusals_are_typed_exceptions_with_the_apis_code_and_status(served, conv):
    with Client(served.base, api_key="fmx_not_a_key") as stranger:
        with pytest.raises(Unauthorized) as raised:
            stranger.messages(conv)
    assert raised.value.status == 401
    with Client(served.base, api_key=served.guest_bot) as guest, Client(served.base, api_key=served.bot) as bot:
        with pytest.raises(Forbidden) as raised:
            guest.append(conv, "I am the owner", trust="operator")
        assert (raised.value.status, raised.value.code) == (403, "trust_not_allowed")
        with pytest.raises(InvalidInput) as raised:
            bot.append(conv, "beep", role="robot")
        assert raised.value.status == 422 and "role" in raised.value.message
        bot.append(conv, "first", idempotency_key="k-1")
        with pytest.raises(Conflict) as raised:
            bot.append(conv, "another body", idempotency_key="k-1")
        assert (raised.value.status, raised.value.code) == (409, "idempotency_conflict")
        with pytest.raises(Forbidden) as raised:
            bot.rollback("user_md", 1)  # a channel key is no operator
        assert raised.value.status == 403
    with Client(served.base, api_key=served.operator) as ops:
        with pytest.raises(NotFound) as raised:
            ops.archive_memory(987654, reason="x")
        assert (raised.value.status, raised.value.code) == (404, "not_found")


def test_a_bot_conversation_through_the_client(served, script, conv):
    served.manage("fermix_setup", "--noinput")
    ops = Client(served.base, api_key=served.operator)
    bot = Client(served.base, api_key=served.bot)
    assert bot.health()["status"] == "ok"
    earlier = (datetime.now(UTC) - timedelta(minutes=5)).replace(microsecond=0)
    backfilled = ops.append(conv, "I live in Lisbon.", created_at=earlier, trust="operator")
    assert datetime.fromisoformat(backfilled["created_at"]) == earlier
    assert bot.preflight(conv) == {"compacted": False, "notice": None}

    script.push("turn", tool_call("memory_store", {"key": "home", "value": "lives in Lisbon", "category": "identity"}),
                Reply(text="Noted."))
    turn = bot.turn(conv, "Remember where I live.", trust="operator", sender="ana")
    assert (turn["reply"], turn["usage"]["tool_calls"]) == ("Noted.", 1)
    assert "lives in Lisbon" in str(bot.prompt(conv, trust="operator")["system_messages"])
    assert bot.prompt()["conversation"] is None

    bot.append(conv, "Anything else?", role="assistant")
    assert bot.commit(conv, peak_prompt_tokens=100, trust="operator")["review"] == "queued"
    stored = bot.call_tool("memory_store", conv, {"key": "tea", "value": "drinks green tea",
                                                  "category": "preference"}, trust="operator")
    assert stored["ok"]
    recalled = bot.call_tool("memory_recall", conv, {"query": "tea"}, trust="operator")
    assert "drinks green tea" in [hit.get("value") for hit in recalled["data"]]
    assert bot.call_tool("memory_sources_list", conv)["ok"]
    rows = {row["key"]: row for row in bot.memories()["memories"]}
    assert {"home", "tea"} <= set(rows)
    assert [row["key"] for row in bot.memories(q="Lisbon")["memories"]] == ["home"]
    assert bot.call_tool("memory_forget", conv, {"id": rows["tea"]["id"]}, trust="operator")["ok"]
    assert ops.restore_memory(rows["tea"]["id"])["memory"]["archived"] is False
    assert ops.archive_memory(rows["tea"]["id"], reason="test")["memory"]["archived"] is True
    # A review now, of a conversation no commit has queued a background review for (that would be a 409).
    bot.append(conv + ":side", "I like jazz.", trust="operator")
    assert ops.review(conversation=conv + ":side")["total"] == 1

    assert bot.compact(conv, trust="operator")["compacted"] is True
    bot.append(conv, "Thanks.")
    assert bot.clear(conv, trust="operator")["cleared"] == 1
    assert bot.messages(conv)["messages"] == []

    types = {resource["resource_type"] for resource in bot.resources()["resources"]}
    assert {"soul_md", "user_md"} <= types
    user_revisions = [r["revision"] for r in bot.revisions("user_md")["revisions"]]
    assert len(user_revisions) >= 2
    newest = bot.revision("user_md", user_revisions[0])["content"]
    assert "lives in Lisbon" in newest
    older = next(n for n in user_revisions if bot.revision("user_md", n)["content"] != newest)
    changed = bot.diff("user_md", older, user_revisions[0])["diff"]
    assert changed.startswith("---") and bot.diff("user_md", older, older)["diff"] == ""
    assert ops.rollback("user_md", older)["status"] == "rolled_back"

    soul = served.home / "bootstrap/main/SOUL.md"
    original = soul.read_text()
    soul.write_text(original + "\nAnswer in rhymes.\n")
    bot.prompt()  # the hand edit is captured as a revision
    first = bot.soul_propose("revert", revision=1, trust="operator")
    assert "-Answer in rhymes." in first["diff"]
    assert bot.soul_deny(first["token"], trust="operator")["status"] == "denied"
    second = bot.soul_propose("revert", revision=1, trust="operator")
    assert bot.soul_apply(second["token"], trust="operator")["revision"] == 3
    assert soul.read_text() == original
    ops.close()
    bot.close()


def test_the_async_client_speaks_the_same_api(served, script, conv):
    script.push("turn", Reply(text="Hi Ana."))

    async def run():
        async with AsyncClient(served.base, api_key=served.bot) as fermix:
            await fermix.append("slack:7", "hello", sender="ana")
            answer = await fermix.turn("slack:7", "Say hi", sender="ana")
            window = await fermix.messages("slack:7")
            prompt = await fermix.prompt("slack:7")
            with pytest.raises(Forbidden):
                await fermix.compact("slack:7")  # guest trust by default
            return answer, window, prompt

    answer, window, prompt = asyncio.run(run())
    assert answer["reply"] == "Hi Ana."
    assert [m["content"] for m in window["messages"]] == ["hello", "Say hi", "Hi Ana."]
    assert [m["content"] for m in prompt["history"]] == ["hello", "Say hi", "Hi Ana."]


def test_chat_type_is_sent_when_given_and_a_group_prompt_leaves_user_md_out(served, conv):
    with Client(served.base, api_key=served.bot) as fermix:
        fermix.call_tool("memory_store", conv, {"key": "home", "value": "lives in Lisbon", "category": "identity"},
                         trust="operator")
        assert "lives in Lisbon" in str(fermix.prompt(conv, trust="operator")["system_messages"])
        assert "lives in Lisbon" not in str(fermix.prompt(conv)["system_messages"])  # a guest's view
        group = conv + ":group"
        fermix.append(group, "hi all", chat_type="group")
        for shown in (fermix.prompt(group, trust="operator"), fermix.prompt(conv, chat_type="group", trust="operator")):
            assert "lives in Lisbon" not in str(shown["system_messages"])
            assert any(part.startswith("USER.md left out") for part in shown["parts"])
