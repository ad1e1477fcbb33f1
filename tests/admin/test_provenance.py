"""Provenance: from a line of USER.md to its row, the review run or tool that wrote it, and the messages."""

import json
import re

import pytest
from django.urls import reverse

from memory.conversations import ConversationKey
from memory.models import Memory, ReviewRun
from memory.reviewer import review_conversation
from memory.rows import memory_replace
from memory.tools import ToolContext, run_tool
from resources.models import Resource
from tests.fakeprovider import Reply, provider_config_toml, use_config
from tests.personas import say

pytestmark = [pytest.mark.django_db]


def provenance_html(console, revision=None):
    user_md = Resource.objects.get(resource_type="user_md")
    number = revision or user_md.current_revision
    return console.get(reverse("admin:resources_resource_provenance", args=[user_md.pk, number])).content.decode()


def test_a_line_leads_to_its_row_its_review_run_and_its_messages(console, world):
    html = provenance_html(console)
    row = Memory.objects.get(key="home_city")
    run = ReviewRun.objects.get()
    line = re.search(r"<tr>.*?- lives in Lisbon.*?</tr>", html, re.S).group(0)
    assert f"/admin/memory/memory/{row.id}/change/" in line
    assert f"/admin/memory/reviewrun/{run.id}/change/" in line
    assert f"/admin/memory/message/{world.message.id}/change/" in line
    assert "model call" in line


def test_a_line_written_by_an_operator_names_the_operator(console, world):
    line = re.search(r"<tr>.*?- prefers green tea.*?</tr>", provenance_html(console), re.S).group(0)
    assert f"/admin/memory/memory/{world.fact.id}/change/" in line and "operator" in line


def test_an_old_revision_finds_the_row_whose_value_changed_since(console, world):
    first = Resource.objects.get(resource_type="user_md").current_revision
    row = Memory.objects.get(key="home_city")
    memory_replace(memory_id=row.id, value="lives in Porto", actor_type="operator", actor_id="test")
    from memory.prompt_files import prompt_files_rebuild

    prompt_files_rebuild(agent_id="main")
    line = re.search(r"<tr>.*?- lives in Lisbon.*?</tr>", provenance_html(console, first), re.S).group(0)
    assert f"/admin/memory/memory/{row.id}/change/" in line and "has changed since" in line


def test_a_review_run_page_lists_its_operations(console, world):
    run = ReviewRun.objects.get()
    html = console.get(reverse("admin:memory_reviewrun_change", args=[run.id])).content.decode()
    assert "home_city" in html or "lives in Lisbon" in html
    assert "Undo this run…" in html
    assert f"/admin/memory/message/{world.message.id}/change/" in html


def test_undo_reverses_the_run_after_a_confirmation(console, world):
    run = ReviewRun.objects.get()
    url = reverse("admin:memory_reviewrun_undo", args=[run.id])
    assert "Yes, undo this run" in console.get(url).content.decode()
    assert Memory.objects.get(key="home_city").archived_at is None
    response = console.post(url, follow=True)
    assert "Undid review run" in response.content.decode()
    assert Memory.objects.get(key="home_city").archived_at is not None
    assert ReviewRun.objects.get().status == "undone"


def test_a_refused_undo_shows_why(console, world):
    run = ReviewRun.objects.get()
    row = Memory.objects.get(key="home_city")
    memory_replace(memory_id=row.id, value="lives in Porto", actor_type="operator", actor_id="test")
    response = console.post(reverse("admin:memory_reviewrun_undo", args=[run.id]), follow=True)
    assert "Not undone (conflict)" in response.content.decode()
    assert ReviewRun.objects.get().status == "ok"


def test_a_line_written_by_the_memory_tool_names_the_tool_and_its_conversation(console, world):
    ctx = ToolContext(agent_id="main", owner_id="default", conversation=ConversationKey.parse("telegram:42"),
                      trust="operator")
    assert run_tool("memory_store", ctx, {"key": "deadline", "value": "the report is due Friday",
                                          "category": "context"}).ok
    memory_md = Resource.objects.get(resource_type="memory_md")
    html = console.get(reverse("admin:resources_resource_provenance",
                               args=[memory_md.pk, memory_md.current_revision])).content.decode()
    line = re.search(r"<tr>.*?- the report is due Friday.*?</tr>", html, re.S).group(0)
    row = Memory.objects.get(key="deadline")
    assert f"/admin/memory/memory/{row.id}/change/" in line
    assert "tool: memory_store" in line and "telegram:42:root" in line
    assert "chat_id=42" in line  # a link to the conversation's messages


def test_a_line_links_the_message_the_model_cited(console, home, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        said = [say("I work as a marine biologist"), say("nice weather"), say("thanks!")]
        fake_provider.push(Reply(text=json.dumps({"operations": [
            {"op": "add", "category": "identity", "key": "job", "value": "works as a marine biologist",
             "message_ids": [said[0].id]},
            {"op": "add", "category": "interest", "key": "weather", "value": "enjoys sunny weather"}]})))
        review_conversation(agent_id="main", conversation="telegram:42", force=True)
        html = provenance_html(console)
    cited = re.search(r"<tr>.*?- works as a marine biologist.*?</tr>", html, re.S).group(0)
    assert re.findall(r"/admin/memory/message/(\d+)/change/", cited) == [str(said[0].id)]
    uncited = re.search(r"<tr>.*?- enjoys sunny weather.*?</tr>", html, re.S).group(0)
    assert f"from messages <a href=\"/admin/memory/message/{said[0].id}/change/\">#{said[0].id}</a>" in uncited
    assert f"#{said[-1].id}</a>" in uncited
    row = Memory.objects.get(key="weather")
    page = console.get(reverse("admin:memory_memory_change", args=[row.id])).content.decode()
    assert f"from messages <a href=\"/admin/memory/message/{said[0].id}/change/\">#{said[0].id}</a>" in page
