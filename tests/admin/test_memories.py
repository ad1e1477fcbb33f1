"""Memory rows: filters, archive with a reason (two steps for a selection), restore, history, rendering."""

import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from fermix_site.conf import conf
from memory.models import Memory, MemoryEvent
from memory.rows import memory_archive
from tests.memory_factories import fact

pytestmark = [pytest.mark.django_db]

URL = reverse("admin:memory_memory_changelist")


def listed(response) -> set[int]:
    return {int(i) for i in re.findall(r'href="/admin/memory/memory/(\d+)/change/', response.content.decode())}


def user_md() -> str:
    path = conf.memory_dir("main") / "USER.md"
    return path.read_text() if path.exists() else ""


def test_filters_by_agent_owner_category_scope_and_archived(console, home):
    city = fact("city", "lives in Porto", "identity")
    rule = fact("tone", "answer briefly", "directive")
    other_owner = fact("city", "lives in Oslo", "identity", owner="guest-7")
    other_agent = fact("city", "lives in Rome", "identity", agent="second")
    gone = fact("old", "used to live in Faro", "identity")
    memory_archive(memory_id=gone.id, archived_by="test")
    assert listed(console.get(URL, {"category": "directive"})) == {rule.id}
    assert listed(console.get(URL, {"scope_type": "agent"})) == {rule.id}
    assert listed(console.get(URL, {"owner_id": "guest-7"})) == {other_owner.id}
    assert listed(console.get(URL, {"agent_id": "second"})) == {other_agent.id}
    assert listed(console.get(URL, {"archived": "yes"})) == {gone.id}
    assert city.id in listed(console.get(URL, {"archived": "no"}))


def test_search_uses_the_full_text_index(console, home):
    hiking = fact("hobby", "goes hiking in the mountains", "interest")
    fact("drink", "prefers tea", "preference")
    assert listed(console.get(URL, {"q": "hikes mountain"})) == {hiking.id}


def test_bulk_archive_asks_for_confirmation_and_a_reason_first(console, home):
    a = fact("a", "likes jazz", "interest")
    b = fact("b", "likes chess", "interest")
    selection = {"action": "archive_selected", ACTION_CHECKBOX_NAME: [a.id, b.id]}
    response = console.post(URL, selection)
    assert response.status_code == 200 and "Yes, archive" in response.content.decode()
    assert Memory.objects.filter(archived_at__isnull=False).count() == 0
    response = console.post(URL, {**selection, "post": "yes", "reason": ""})
    assert "Give a reason" in response.content.decode()
    assert Memory.objects.filter(archived_at__isnull=False).count() == 0
    response = console.post(URL, {**selection, "post": "yes", "reason": "outdated hobbies"})
    assert response.status_code == 302
    for row in Memory.objects.filter(pk__in=[a.id, b.id]):
        assert row.archived_at is not None and row.archive_reason == "outdated hobbies"
        assert row.archived_by == "operator:operator"
    events = MemoryEvent.objects.filter(action="archive")
    assert {(e.memory_id, e.actor_type, e.reason) for e in events} == {(a.id, "operator", "outdated hobbies"),
                                                                        (b.id, "operator", "outdated hobbies")}
    assert "likes jazz" not in user_md() and "likes chess" not in user_md()


def test_archive_and_restore_one_row_rebuild_user_md(console, home):
    row = fact("city", "lives in Porto", "identity")
    from memory.prompt_files import prompt_files_rebuild

    prompt_files_rebuild(agent_id="main")
    assert "lives in Porto" in user_md()
    archive = reverse("admin:memory_memory_archive", args=[row.id])
    assert "Reason" in console.get(archive).content.decode()
    assert Memory.objects.get(pk=row.id).archived_at is None  # GET changes nothing
    console.post(archive, {"reason": "moved away"})
    assert Memory.objects.get(pk=row.id).archived_at is not None
    assert "lives in Porto" not in user_md()
    restore = reverse("admin:memory_memory_restore", args=[row.id])
    console.get(restore)
    assert Memory.objects.get(pk=row.id).archived_at is not None
    console.post(restore)
    assert Memory.objects.get(pk=row.id).archived_at is None
    assert "lives in Porto" in user_md()
    assert [e.action for e in MemoryEvent.objects.filter(memory_id=row.id)] == ["add", "archive", "restore"]


def test_restore_action_restores_the_selection(console, home):
    row = fact("city", "lives in Porto", "identity")
    memory_archive(memory_id=row.id, archived_by="test")
    console.post(URL, {"action": "restore_selected", ACTION_CHECKBOX_NAME: [row.id]})
    assert Memory.objects.get(pk=row.id).archived_at is None
    assert "lives in Porto" in user_md()


def test_a_row_page_shows_its_history_and_where_it_renders(console, home):
    row = fact("city", "lives in Porto", "identity")
    fact("city", "lives in Lisbon", "identity")  # replaces the value: a second history entry
    html = console.get(reverse("admin:memory_memory_change", args=[row.id])).content.decode()
    assert "USER.md › Identity" in html
    assert "lives in Porto" in html and "lives in Lisbon" in html and "replace" in html


def test_a_row_page_says_why_a_row_does_not_render(console, home):
    job_row = fact("k", "job-scoped note", "context", scope_type="job", scope_id="job:1")
    html = console.get(reverse("admin:memory_memory_change", args=[job_row.id])).content.decode()
    assert "job-scoped rows never render" in html
    rows = [fact(f"goal{i}", f"goal number {i}", "goal", minute=i) for i in range(6)]  # Goals keeps 5
    html = console.get(reverse("admin:memory_memory_change", args=[rows[0].id])).content.decode()
    assert "over its section&#x27;s row cap" in html


def test_the_changelist_shows_each_rows_prompt_file(console, home):
    fact("city", "lives in Porto", "identity")
    fact("note", "a conversation note", "", scope_type="conversation", scope_id="telegram:1:root")
    html = console.get(URL).content.decode()
    assert "USER.md › Identity" in html and "a conversation note (no category) never renders" in html


def test_rows_cannot_be_edited_or_deleted_through_forms(console, home):
    row = fact("city", "lives in Porto", "identity")
    response = console.post(reverse("admin:memory_memory_change", args=[row.id]), {"value": "hacked"})
    assert response.status_code == 403
    assert console.post(reverse("admin:memory_memory_delete", args=[row.id]), {"post": "yes"}).status_code == 403
    assert Memory.objects.get(pk=row.id).value == "lives in Porto"
