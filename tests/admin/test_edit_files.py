"""Editing a bootstrap file in the console: text area, preview diff, confirmation, a `manual_edit` revision."""

from pathlib import Path

import pytest
from django.urls import reverse

from resources.catalog import content_hash
from resources.models import Resource, ResourceRevision
from tests.admin.conftest import HOSTILE, soul_write

pytestmark = [pytest.mark.django_db]

NEW = "# Soul\n\nBe kind, brief, exact and warm.\n"


def edit_url(resource):
    return reverse("admin:resources_resource_edit", args=[resource.pk])


def post(console, resource, content, **extra):
    return console.post(edit_url(resource), {"content": content, "base_revision": resource.current_revision,
                                             **extra})


def revisions():
    return list(ResourceRevision.objects.filter(resource_type="soul_md").order_by("revision"))


def test_the_form_holds_the_current_text_and_says_soul_md_needs_the_owner(console, world):
    html = console.get(edit_url(world.soul)).content.decode()
    assert "Be kind, brief and exact." in html and 'name="base_revision" value="2"' in html
    assert "you act as the owner (operator trust)" in html
    assert 'id="confirm-edit"' not in html  # no confirmation before a preview


def test_preview_shows_the_diff_and_writes_nothing(console, world):
    html = post(console, world.soul, NEW, preview="1").content.decode()
    assert "<ins>" in html and "warm" in html
    assert 'id="confirm-edit"' in html and f'value="{content_hash(NEW)}"' in html
    assert len(revisions()) == 2


def test_confirm_writes_a_manual_edit_revision_naming_the_operator(console, world):
    response = post(console, world.soul, NEW.replace("\n", "\r\n"), confirm="yes", previewed=content_hash(NEW),
                    reason="warmer tone")
    assert response.status_code == 302
    newest = revisions()[-1]
    assert (newest.revision, newest.mutation_source, newest.content) == (3, "manual_edit", NEW)
    assert newest.provenance == {"operator": "operator", "via": "admin", "reason": "warmer tone"}
    assert Path(world.soul.resource_path).read_text() == NEW  # LF, as the file had


def test_confirm_of_a_text_that_was_not_previewed_shows_the_preview_again(console, world):
    html = post(console, world.soul, NEW, confirm="yes", previewed=content_hash("something else")).content.decode()
    assert "The text changed after the preview" in html and 'id="confirm-edit"' in html
    assert len(revisions()) == 2


def test_a_change_underneath_refuses_and_previews_against_the_new_revision(console, world):
    soul_write("# Soul\n\nWritten meanwhile.\n")
    html = post(console, world.soul, NEW, confirm="yes", previewed=content_hash(NEW)).content.decode()
    assert "changed since you opened it (now revision 3)" in html
    assert "meanwhile" in html and 'name="base_revision" value="3"' in html
    assert len(revisions()) == 3 and revisions()[-1].content == "# Soul\n\nWritten meanwhile.\n"


def test_a_hand_edit_on_disk_is_recorded_before_the_form_is_shown(console, world):
    Path(world.soul.resource_path).write_text("# Soul\n\nEdited by hand.\n")
    html = console.get(edit_url(world.soul)).content.decode()
    assert "Edited by hand." in html and 'name="base_revision" value="3"' in html
    assert revisions()[-1].provenance["detected_during"] == "admin_edit"


def test_the_same_text_says_no_changes_and_offers_no_confirmation(console, world):
    html = post(console, world.soul, revisions()[-1].content, preview="1").content.decode()
    assert "No changes" in html and 'id="confirm-edit"' not in html


def test_a_nul_character_is_a_form_error(console, world):
    html = post(console, world.soul, "bad\x00text", confirm="yes", previewed="x").content.decode()
    assert "Null characters are not allowed" in html and len(revisions()) == 2


def test_hostile_text_is_escaped_in_the_text_area_and_the_preview(console, world):
    html = post(console, world.soul, HOSTILE, preview="1").content.decode()
    assert "<script>window.__xss" not in html and "&lt;script&gt;window.__xss" in html


def test_user_md_memory_md_and_checkpoints_are_not_edited_here(console, world):
    for resource in (world.user_md, world.checkpoint):
        assert console.get(edit_url(resource)).status_code == 404
    html = console.get(reverse("admin:resources_resource_change", args=[world.user_md.pk])).content.decode()
    assert 'id="edit-file"' not in html
    html = console.get(reverse("admin:resources_resource_change", args=[world.soul.pk])).content.decode()
    assert 'id="edit-file"' in html


def test_staff_without_the_change_permission_cannot_edit(client, viewer, world):
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_resource"))
    client.force_login(viewer)
    assert client.get(reverse("admin:resources_resource_change", args=[world.soul.pk])).status_code == 200
    assert client.get(edit_url(world.soul)).status_code == 404
    assert client.post(edit_url(world.soul), {"content": NEW, "base_revision": 2, "confirm": "yes",
                                              "previewed": content_hash(NEW)}).status_code == 404
    assert Resource.objects.get(pk=world.soul.pk).current_revision == 2
