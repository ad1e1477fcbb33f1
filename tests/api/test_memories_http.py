"""Memories over HTTP: one row with its history, an operator's correction and addition through admission,
and the agent's conversations a page at a time."""

import pytest

from fermix_site.conf import conf
from memory.models import Memory
from tests.personas import error_of

pytestmark = pytest.mark.django_db


def add(caller, **fields):
    return caller.post("/agents/main/memories", {"reason": "the owner said so", **fields})


def user_md():
    return (conf.memory_dir("main") / "USER.md").read_text()


def test_an_operator_adds_a_long_term_row_scoped_by_its_category(operator, home):
    added = add(operator, key="home_city", value="lives in Lisbon", category="identity")
    assert added.status_code == 201, added.content
    body = added.json()
    assert body["action"] == "add" and body["rendered_in"] == ["USER.md"] and body["warnings"] == []
    assert (body["memory"]["scope_type"], body["memory"]["scope_id"]) == ("owner", "default")
    assert "- lives in Lisbon" in user_md()
    work = add(operator, key="deadline", value="the atlas translation is due in May", category="context").json()
    assert (work["memory"]["scope_type"], work["memory"]["scope_id"], work["rendered_in"]) == (
        "agent", "main", ["MEMORY.md"])
    again = add(operator, key="home_city", value="lives in Porto", category="identity")
    assert (again.status_code, again.json()["action"], again.json()["memory"]["id"]) == (
        200, "replace", body["memory"]["id"])
    assert "- lives in Porto" in user_md() and "Lisbon" not in user_md()
    assert Memory.objects.filter(key="home_city").count() == 1


def test_adding_is_refused_to_channel_keys_and_bad_rows(operator, owner_bot, other_bot):
    # Only an operator key adds rows: a channel key's word for the owner does not make it one.
    assert error_of(add(owner_bot, key="k", value="v", category="identity", trust="operator")) == (
        403, "operator_key_required")
    assert error_of(add(owner_bot, key="k", value="v", category="identity")) == (403, "operator_key_required")
    assert error_of(add(other_bot, key="k", value="v", category="identity")) == (403, "agent_not_allowed")
    assert error_of(add(operator, key="k", value="v")) == (422, "invalid_input")
    assert error_of(add(operator, key="k", value="x" * 201, category="goal")) == (400, "value_too_long")
    assert error_of(add(operator, key="k", value="v", category="mood")) == (422, "invalid_input")
    assert not Memory.objects.exists()


def test_a_row_is_read_with_its_whole_history(operator, bot, other_bot):
    row = add(operator, key="pet", value="has a cat", category="identity").json()["memory"]
    operator.patch(f"/memories/{row['id']}", {"value": "has two cats", "reason": "a second cat"})
    operator.post(f"/memories/{row['id']}/archive", {"reason": "the user asked to forget"})
    read = bot.get(f"/memories/{row['id']}")
    assert read.status_code == 200
    body = read.json()
    assert body["memory"]["value"] == "has two cats" and body["memory"]["archived"] is True
    history = [(e["action"], e["before_value"], e["after_value"], e["actor_id"], e["reason"]) for e in body["history"]]
    assert history == [
        ("add", None, "has a cat", "api:ops", "the owner said so"),
        ("replace", "has a cat", "has two cats", "api:ops", "a second cat"),
        ("archive", "has two cats", "has two cats", "api:ops", "the user asked to forget")]
    assert error_of(bot.get("/memories/999999")) == (404, "not_found")
    assert error_of(other_bot.get(f"/memories/{row['id']}")) == (403, "agent_not_allowed")


def test_an_operator_corrects_a_row_through_admission(operator, owner_bot):
    row = add(operator, key="job", value="works as a translator", category="identity").json()["memory"]
    path = f"/memories/{row['id']}"
    changed = operator.patch(path, {"value": "works as an editor", "reason": "a new job"})
    assert changed.status_code == 200, changed.content
    assert changed.json()["memory"]["value"] == "works as an editor" and changed.json()["rendered_in"] == ["USER.md"]
    assert "- works as an editor" in user_md()
    recategorised = operator.patch(path, {"category": "goal", "reason": "it is what they want"}).json()["memory"]
    assert (recategorised["category"], recategorised["value"]) == ("goal", "works as an editor")

    assert error_of(operator.patch(path, {"category": "context", "reason": "r"})) == (400, "scope_change")
    assert error_of(operator.patch(path, {"value": "works"})) == (422, "invalid_input")  # no reason
    assert error_of(operator.patch(path, {"value": "works", "reason": "  "})) == (422, "invalid_input")
    assert error_of(operator.patch(path, {"reason": "nothing"})) == (400, "nothing_to_change")
    assert error_of(operator.patch(path, {"value": "", "reason": "r"}))[0] == 400
    assert error_of(owner_bot.patch(path, {"value": "lies", "reason": "r"})) == (403, "operator_key_required")
    assert error_of(operator.patch("/memories/424242", {"value": "v", "reason": "r"})) == (404, "not_found")
    operator.post(f"{path}/archive", {"reason": "gone"})
    assert error_of(operator.patch(path, {"value": "v", "reason": "r"})) == (409, "archived")
    assert Memory.objects.get(pk=row["id"]).value == "works as an editor"


def test_conversations_are_listed_newest_activity_first_a_page_at_a_time(bot, other_bot):
    for conversation in ("telegram:1", "slack:2", "telegram:3", "telegram:1", "voice:4"):
        bot.say("hello", conversation=conversation)
    first = bot.get("/agents/main/conversations", limit=3)
    assert first.status_code == 200, first.content
    page = first.json()
    assert [c["conversation"] for c in page["conversations"]] == ["voice:4:root", "telegram:1:root",
                                                                  "telegram:3:root"]
    newest = page["conversations"][0]
    assert (newest["channel"], newest["chat_id"], newest["thread_scope"]) == ("voice", "4", "root")
    assert newest["last_message_id"] and newest["last_activity_at"] >= page["conversations"][1]["last_activity_at"]
    rest = bot.get("/agents/main/conversations", limit=3, cursor=page["next_cursor"]).json()
    assert [c["conversation"] for c in rest["conversations"]] == ["slack:2:root"] and rest["next_cursor"] is None
    everything = bot.get("/agents/main/conversations").json()
    assert len(everything["conversations"]) == 4 and everything["next_cursor"] is None
    for cursor in ("nonsense", "1", "1.x", "-1.2", "9" * 30 + ".1"):
        assert error_of(bot.get("/agents/main/conversations", cursor=cursor))[0] in (400, 422), cursor
    assert error_of(bot.get("/agents/main/conversations", limit=0)) == (422, "invalid_input")
    assert other_bot.get("/agents/other/conversations").json() == {"conversations": [], "next_cursor": None}
