"""Adding and correcting memory rows in the console: through admission with operator trust, recorded in
the row's history with the operator and the reason, the prompt files rebuilt; a refusal is a form error
and writes nothing."""

import pytest
from django.urls import reverse

from fermix_site.conf import conf
from memory.models import Memory, MemoryEvent
from tests.admin.conftest import HOSTILE
from tests.memory_factories import fact

pytestmark = [pytest.mark.django_db]

ADD = reverse("admin:memory_memory_add")


def correct_url(row):
    return reverse("admin:memory_memory_correct", args=[row.id])


def prompt_file(name):
    path = conf.memory_dir("main") / name
    return path.read_text() if path.exists() else ""


def add(console, **fields):
    data = {"agent_id": "main", "owner_id": "default", "key": "pet", "value": "has a cat called Miso",
            "category": "identity", "reason": "told me on the phone", **fields}
    return console.post(ADD, data)


def test_the_changelist_offers_the_add_page(console, home):
    html = console.get(reverse("admin:memory_memory_changelist")).content.decode()
    assert f'href="{ADD}"' in html
    html = console.get(ADD).content.decode()
    assert 'name="reason"' in html and '<option value="main" selected>main</option>' in html


def test_an_added_row_goes_to_the_owner_scope_with_the_operator_and_reason_in_its_history(console, home):
    response = add(console)
    row = Memory.objects.get(key="pet")
    assert response.status_code == 302 and response["Location"] == reverse("admin:memory_memory_change",
                                                                           args=[row.id])
    assert (row.scope_type, row.scope_id, row.owner_id, row.category) == ("owner", "default", "default", "identity")
    event = MemoryEvent.objects.get(memory=row)
    assert (event.action, event.actor_type, event.actor_id, event.reason) == (
        "add", "operator", "operator", "told me on the phone")
    assert "has a cat called Miso" in prompt_file("USER.md")


def test_an_operator_may_add_a_directive_to_the_agent_scope(console, home):
    add(console, key="tone", value="answer in short paragraphs", category="directive")
    row = Memory.objects.get(key="tone")
    assert (row.scope_type, row.scope_id, row.state) == ("agent", "main", "live")
    assert "answer in short paragraphs" in prompt_file("MEMORY.md")


def test_adding_an_existing_key_replaces_the_live_row(console, home):
    old = fact("pet", "has a dog", "identity")
    add(console)
    assert Memory.objects.filter(key="pet").count() == 1
    assert Memory.objects.get(pk=old.id).value == "has a cat called Miso"
    assert [e.action for e in MemoryEvent.objects.filter(memory_id=old.id).order_by("id")] == ["add", "replace"]


def test_a_value_over_200_characters_is_admissions_form_error_and_writes_nothing(console, home):
    html = add(console, value="x" * 201).content.decode()
    assert "the limit is 200: shorten it to one concise fact (value_too_long)" in html
    assert not Memory.objects.exists() and not MemoryEvent.objects.exists()


def test_a_reason_is_required(console, home):
    html = add(console, reason="").content.decode()
    assert "This field is required." in html and not Memory.objects.exists()


def test_a_bad_owner_id_is_a_form_error(console, home):
    html = add(console, owner_id="../etc").content.decode()
    assert "(invalid_owner)" in html and not Memory.objects.exists()


def test_correcting_a_row_records_the_operator_and_reason_and_rebuilds(console, home):
    row = fact("city", "lives in Porto", "identity")
    from memory.prompt_files import prompt_files_rebuild

    prompt_files_rebuild(agent_id="main")
    html = console.get(correct_url(row)).content.decode()
    assert "lives in Porto" in html
    response = console.post(correct_url(row), {"value": "lives in Lisbon", "category": "identity",
                                               "reason": "moved in May"})
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.value == "lives in Lisbon"
    event = MemoryEvent.objects.filter(memory=row).latest("id")
    assert (event.action, event.before_value, event.after_value, event.actor_id, event.reason) == (
        "replace", "lives in Porto", "lives in Lisbon", "operator", "moved in May")
    assert "lives in Lisbon" in prompt_file("USER.md") and "Porto" not in prompt_file("USER.md")
    page = console.get(reverse("admin:memory_memory_change", args=[row.id])).content.decode()
    assert "moved in May" in page and "operator:operator" in page  # the row's history


def test_moving_a_row_to_another_scope_is_refused(console, home):
    row = fact("city", "lives in Porto", "identity")
    html = console.post(correct_url(row), {"value": "lives in Porto", "category": "context",
                                           "reason": "x"}).content.decode()
    assert "(scope_change)" in html
    row.refresh_from_db()
    assert row.category == "identity" and MemoryEvent.objects.filter(memory=row).count() == 1


def test_a_correction_over_200_characters_changes_nothing(console, home):
    row = fact("city", "lives in Porto", "identity")
    html = console.post(correct_url(row), {"value": "y" * 250, "category": "identity",
                                           "reason": "x"}).content.decode()
    assert "(value_too_long)" in html
    assert Memory.objects.get(pk=row.id).value == "lives in Porto"


def test_an_archived_row_is_not_corrected(console, home):
    from memory.rows import memory_archive

    row = fact("city", "lives in Porto", "identity")
    memory_archive(memory_id=row.id, archived_by="test")
    html = console.post(correct_url(row), {"value": "lives in Faro", "category": "identity",
                                           "reason": "x"}).content.decode()
    assert "restore it first (archived)" in html
    assert Memory.objects.get(pk=row.id).value == "lives in Porto"


def test_the_same_value_writes_no_event(console, home):
    row = fact("city", "lives in Porto", "identity")
    console.post(correct_url(row), {"value": "lives in Porto", "category": "identity", "reason": "x"})
    assert MemoryEvent.objects.filter(memory=row).count() == 1


def test_hostile_values_are_escaped_on_the_forms(console, home):
    row = fact("evil", HOSTILE, "identity")
    for html in (console.get(correct_url(row)).content.decode(),
                 add(console, value=HOSTILE + "x" * 200).content.decode()):
        assert "<script>window.__xss" not in html and "&lt;script&gt;window.__xss" in html


def test_staff_without_the_change_permission_cannot_add_or_correct(client, viewer, home):
    from django.contrib.auth.models import Permission

    row = fact("city", "lives in Porto", "identity")
    viewer.user_permissions.add(Permission.objects.get(codename="view_memory"))
    client.force_login(viewer)
    assert client.get(reverse("admin:memory_memory_change", args=[row.id])).status_code == 200
    assert client.post(ADD, {"key": "k", "value": "v", "category": "identity", "reason": "r",
                             "agent_id": "main", "owner_id": "default"}).status_code in (403, 404)
    assert client.post(correct_url(row), {"value": "v", "category": "identity", "reason": "r"}).status_code == 404
    assert Memory.objects.get(pk=row.id).value == "lives in Porto" and Memory.objects.count() == 1
