"""Pending directives over HTTP and in the console: listed, approved or rejected by an operator only."""

import pytest
from django.urls import reverse

from fermix_site.conf import conf
from memory.models import Memory
from memory.rows import memory_propose
from tests.personas import error_of

pytestmark = pytest.mark.django_db


def proposed(key="reply_style", value="answer in short paragraphs") -> Memory:
    return memory_propose(op="add", agent_id="main", owner_id="default", scope_type="agent", scope_id="main",
                          key=key, value=value, category="directive", actor_type="reviewer", actor_id="run:1")


def memory_md() -> str:
    path = conf.memory_dir("main") / "MEMORY.md"
    return path.read_text() if path.exists() else ""


def test_pending_rows_are_listed_with_what_waits(home, operator):
    row = proposed()
    body = operator.get("/agents/main/memories", state="pending").json()
    assert [m["id"] for m in body["memories"]] == [row.id]
    listed = body["memories"][0]
    assert (listed["state"], listed["approval"]) == ("pending", {"state": "pending", "op": "add"})
    assert operator.get("/agents/main/memories").json()["memories"] == []  # not live


def test_an_operator_approves_and_the_rule_renders(home, operator):
    row = proposed()
    answer = operator.post(f"/memories/{row.id}/approve", {"reason": "yes, do that"})
    assert answer.status_code == 200
    body = answer.json()
    assert body["memory"]["state"] == "live" and body["rendered_in"] == ["MEMORY.md"]
    assert "- answer in short paragraphs" in memory_md()
    assert error_of(operator.post(f"/memories/{row.id}/approve", {})) == (409, "not_pending")


def test_a_rejection_keeps_it_out(home, operator):
    row = proposed()
    body = operator.post(f"/memories/{row.id}/reject", {"reason": "no"}).json()
    assert body["memory"]["state"] == "archived" and body["memory"]["approval"]["state"] == "rejected"
    assert "short paragraphs" not in memory_md()


def test_only_an_operator_decides(home, bot, owner_bot):
    row = proposed()
    for caller in (bot, owner_bot):
        assert error_of(caller.post(f"/memories/{row.id}/approve", {}))[0] == 403
    assert error_of(bot.post("/memories/999999/reject", {}))[0] in (403, 404)
    assert Memory.objects.get(pk=row.id).pending is not None


def test_the_console_lists_and_decides(home, console):
    waiting, other = proposed(), proposed("sign_off", "sign off with 'cheers'")
    url = reverse("admin:memory_memory_changelist")
    page = console.get(url, {"archived": "pending"}).content.decode()
    assert "waiting for approval" in page and f"/admin/memory/memory/{waiting.id}/change/" in page
    console.post(url, {"action": "approve_selected", "_selected_action": [waiting.id]})
    console.post(url, {"action": "reject_selected", "_selected_action": [other.id]})
    waiting.refresh_from_db()
    other.refresh_from_db()
    assert waiting.archived_at is None and other.approval["state"] == "rejected"
    assert "- answer in short paragraphs" in memory_md() and "cheers" not in memory_md()
