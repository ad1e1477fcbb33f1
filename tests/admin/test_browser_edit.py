"""Editing through the rules in a real browser (Debian's chromium): add and correct memory rows through
admission, edit a bootstrap file with a preview diff, the side-by-side diff.

The browser and the logged-in operator are tests/admin/test_browser.py's fixtures.
"""

from pathlib import Path

import pytest
from django.urls import reverse

from fermix_site.conf import conf
from memory.models import Memory, MemoryEvent
from resources.models import ResourceRevision
from tests.admin import test_browser
from tests.admin.conftest import HOSTILE, soul_write

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


browser, operator = test_browser.browser, test_browser.operator  # the same fixtures


def fill(console, selector, text):
    field = console.find(selector)
    field.clear()
    field.send_keys(text)


def select(console, selector, value):
    from selenium.webdriver.support.ui import Select

    Select(console.find(selector)).select_by_value(value)


def soul_revisions():
    return list(ResourceRevision.objects.filter(resource_type="soul_md").order_by("revision"))


def test_add_a_memory_row_from_the_changelist(operator, world):
    operator.open(reverse("admin:memory_memory_changelist"))
    operator.click(f"a[href='{reverse('admin:memory_memory_add')}']")
    fill(operator, "#id_key", "pet")
    fill(operator, "#id_value", "has a cat called Miso")
    select(operator, "#id_category", "identity")
    fill(operator, "#id_reason", "told me on the phone")
    operator.click("#save-memory")
    row = Memory.objects.get(key="pet")
    assert f"Added memory row #{row.id} (owner scope)" in operator.text()
    assert "told me on the phone" in operator.find(".field-history").text  # the row's page, its history
    event = MemoryEvent.objects.get(memory=row)
    assert (event.actor_type, event.actor_id, event.reason) == ("operator", "operator", "told me on the phone")
    assert "has a cat called Miso" in (conf.memory_dir("main") / "USER.md").read_text()


def test_a_value_over_200_characters_is_refused_on_the_form(operator, world):
    operator.open(reverse("admin:memory_memory_add"))
    fill(operator, "#id_key", "essay")
    fill(operator, "#id_value", "likes " + "very " * 50 + "long answers")
    select(operator, "#id_category", "preference")
    fill(operator, "#id_reason", "testing the limit")
    operator.click("#save-memory")
    assert "the limit is 200" in operator.find(".form-row.errors").text
    assert operator.find("#id_value").get_attribute("value").startswith("likes very very")  # kept for fixing
    assert not Memory.objects.filter(key="essay").exists()
    fill(operator, "#id_value", "likes long answers")
    operator.click("#save-memory")
    assert Memory.objects.get(key="essay").value == "likes long answers"


def test_correct_a_row_from_its_page(operator, world):
    operator.open(reverse("admin:memory_memory_change", args=[world.fact.id]))
    operator.click("#correct-row")
    assert operator.find("#current-value").text == "prefers green tea"
    fill(operator, "#id_value", "prefers black coffee")
    fill(operator, "#id_reason", "switched in December")
    operator.click("#save-memory")
    assert f"Corrected memory row #{world.fact.id}" in operator.text()
    history = operator.find(".field-history").text
    assert "prefers green tea" in history and "prefers black coffee" in history
    assert "operator:operator" in history and "switched in December" in history
    user_md = (conf.memory_dir("main") / "USER.md").read_text()
    assert "prefers black coffee" in user_md and "green tea" not in user_md


def test_a_correction_that_moves_a_row_out_of_its_scope_is_refused(operator, world):
    operator.open(reverse("admin:memory_memory_correct", args=[world.fact.id]))
    select(operator, "#id_category", "directive")
    fill(operator, "#id_reason", "make it a rule")
    operator.click("#save-memory")
    assert "scope_change" in operator.text()
    assert Memory.objects.get(pk=world.fact.id).category == "preference"


def test_edit_soul_md_preview_the_diff_and_confirm(operator, world):
    operator.open(reverse("admin:resources_resource_change", args=[world.soul.pk]))
    operator.click("#edit-file")
    assert "act as the owner" in operator.find("#soul-note").text
    assert not operator.find_all("#confirm-edit")  # nothing to confirm before a preview
    editor = operator.find("#id_content")
    assert editor.get_attribute("value") == "# Soul\n\nBe kind, brief and exact.\n"
    fill(operator, "#id_content", "# Soul\n\nBe kind, brief, exact and warm.\n")
    fill(operator, "#id_reason", "a warmer tone")
    operator.click("#preview-edit")
    assert "warm" in " ".join(e.text for e in operator.find_all("#diff ins"))
    assert len(soul_revisions()) == 2  # a preview writes nothing
    operator.click("#confirm-edit")
    assert "Wrote SOUL.md revision 3 (manual_edit)." in operator.text()
    newest = soul_revisions()[-1]
    assert (newest.revision, newest.mutation_source) == (3, "manual_edit")
    assert newest.provenance == {"operator": "operator", "via": "admin", "reason": "a warmer tone"}
    assert Path(world.soul.resource_path).read_text() == "# Soul\n\nBe kind, brief, exact and warm.\n"


def test_a_soul_md_changed_after_the_preview_is_not_overwritten(operator, world):
    operator.open(reverse("admin:resources_resource_edit", args=[world.soul.pk]))
    fill(operator, "#id_content", "# Soul\n\nMine.\n")
    operator.click("#preview-edit")
    soul_write("# Soul\n\nWritten meanwhile.\n")
    operator.click("#confirm-edit")
    assert "changed since you opened it (now revision 3)" in operator.find("#refusal").text
    assert soul_revisions()[-1].content == "# Soul\n\nWritten meanwhile.\n"
    assert "meanwhile" in operator.find("#diff tr.delete").text  # the preview is against the new revision
    operator.click("#confirm-edit")
    assert soul_revisions()[-1].content == "# Soul\n\nMine.\n" and len(soul_revisions()) == 4


def test_hostile_text_in_the_editor_and_its_preview_runs_nothing(operator, world):
    operator.open(reverse("admin:resources_resource_edit", args=[world.soul.pk]))
    fill(operator, "#id_content", HOSTILE)
    operator.click("#preview-edit")
    assert not operator.xss_fired()
    assert "<script>window.__xss = 1</script>" in operator.find("#diff tr.insert").text
    operator.click("#confirm-edit")
    operator.open(reverse("admin:resources_resource_edit", args=[world.soul.pk]))
    assert not operator.xss_fired() and operator.find("#id_content").get_attribute("value") == HOSTILE


def test_switch_the_diff_between_unified_and_side_by_side(operator, world):
    operator.open(reverse("admin:resources_resource_diff", args=[world.soul.pk]) + "?a=1&b=2")
    assert len(operator.find("#diff tr.delete").find_elements("css selector", "td")) == 3
    operator.click("#view-split")
    change = operator.find("#diff tr.change")
    old, new = change.find_elements("css selector", "td.text")
    assert "Be kind and brief." in old.text and "Be kind, brief and exact." in new.text
    assert old.location["x"] < new.location["x"]  # old on the left, new on the right
    operator.click("input[type=submit][value=Compare]")  # comparing again keeps the view
    assert operator.find_all("#diff tr.change") and "view=split" in operator.driver.current_url
    operator.click("#view-unified")
    assert operator.find_all("#diff tr.delete") and not operator.find_all("#diff tr.change")
