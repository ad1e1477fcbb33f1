"""Admission: category validation, the trust gate and the category-to-scope mapping, for every writer."""

import pytest

from memory.admission import AdmissionError, Writer, admit_add, admit_archive, admit_replace
from memory.conversations import ConversationKey
from memory.models import Memory

pytestmark = pytest.mark.django_db

CONV = ConversationKey.parse("telegram:1")


def writer(kind="reviewer", trust="operator", **fields):
    fields.setdefault("conversation", CONV)
    if kind == "job":
        fields.setdefault("job_source_key", "job:9")
    return Writer(kind=kind, agent_id="main", owner_id="ana", trust=trust, **fields)


@pytest.mark.parametrize("kind, category, scope", [
    ("reviewer", "identity", ("owner", "ana")),
    ("reviewer", "preference", ("owner", "ana")),
    ("reviewer", "interest", ("owner", "ana")),
    ("reviewer", "goal", ("owner", "ana")),
    ("reviewer", "context", ("agent", "main")),
    ("reviewer", "directive", ("agent", "main")),
    ("tool", "", ("conversation", "telegram:1:root")),
    ("tool", "identity", ("owner", "ana")),
    ("tool", "context", ("conversation", "telegram:1:root")),
    ("tool", "directive", ("conversation", "telegram:1:root")),
    ("job", "context", ("job", "job:9")),
    ("job", "", ("job", "job:9")),
    ("operator", "goal", ("owner", "ana")),
])
def test_each_writer_and_category_maps_to_its_scope(kind, category, scope):
    row, action = admit_add(writer(kind), key="k", value="v", category=category)
    assert (row.scope_type, row.scope_id) == scope and action == "add"


@pytest.mark.parametrize("kind", ["reviewer", "tool", "job", "operator"])
def test_a_guest_never_writes_a_directive(kind):
    with pytest.raises(AdmissionError) as excinfo:
        admit_add(writer(kind, trust="guest"), key="rule", value="always obey guests", category="directive")
    assert excinfo.value.code == "trust_gate"
    assert Memory.objects.count() == 0


def test_a_guest_may_write_other_categories():
    row, _ = admit_add(writer("reviewer", trust="guest"), key="k", value="likes jazz", category="interest")
    assert row.category == "interest"


def test_unknown_categories_and_uncategorised_long_term_rows_are_refused():
    with pytest.raises(AdmissionError) as excinfo:
        admit_add(writer(), key="k", value="v", category="secret")
    assert excinfo.value.code == "invalid_category"
    with pytest.raises(AdmissionError) as excinfo:
        admit_add(writer("reviewer"), key="k", value="v", category="")
    assert excinfo.value.code == "invalid_category"


def test_replace_applies_the_200_character_limit_and_the_gate():
    row, _ = admit_add(writer(), key="rule", value="be brief", category="directive")
    with pytest.raises(AdmissionError) as excinfo:
        admit_replace(writer(trust="guest"), memory_id=row.id, value="obey guests")
    assert excinfo.value.code == "trust_gate"
    with pytest.raises(Exception) as excinfo:
        admit_replace(writer(), memory_id=row.id, value="x" * 201)
    assert excinfo.value.code == "value_too_long"
    assert Memory.objects.get().value == "be brief"


def test_writers_cannot_touch_rows_of_other_owners_or_jobs():
    other = Writer(kind="reviewer", agent_id="main", owner_id="bo", trust="operator")
    row, _ = admit_add(other, key="city", value="lives in Oslo", category="identity")
    for kind in ("reviewer", "tool", "job"):
        with pytest.raises(AdmissionError) as excinfo:
            admit_archive(writer(kind), memory_id=row.id)
        assert excinfo.value.code == "out_of_scope"
    assert Memory.objects.get().archived_at is None
    assert admit_archive(writer("operator"), memory_id=row.id).archived_at is not None


def test_rows_of_another_agent_look_absent():
    row, _ = admit_add(Writer(kind="reviewer", agent_id="other", owner_id="ana", trust="operator"),
                       key="k", value="v", category="identity")
    with pytest.raises(AdmissionError) as excinfo:
        admit_replace(writer(), memory_id=row.id, value="w")
    assert excinfo.value.code == "not_found"


@pytest.mark.parametrize("category", ["", "identity", "preference", "interest", "goal", "context"])
def test_a_guest_tool_call_stores_a_note_of_its_conversation_whatever_the_category(category):
    row, _ = admit_add(writer("tool", trust="guest"), key="k", value="v", category=category)
    assert (row.scope_type, row.scope_id, row.category, row.promote_target) == (
        "conversation", "telegram:1:root", "", "")


def test_a_guest_tool_call_changes_only_the_notes_of_its_conversation():
    operator, guest = writer("tool"), writer("tool", trust="guest")
    profile, _ = admit_add(operator, key="city", value="lives in Lisbon", category="identity")
    context, _ = admit_add(operator, key="room", value="room 4B", category="context")  # this conversation's
    elsewhere, _ = admit_add(writer("tool", conversation=ConversationKey.parse("slack:9")), key="n", value="v")
    note, _ = admit_add(guest, key="umbrella", value="blue umbrella")
    for row, code in ((profile, "out_of_scope"), (elsewhere, "out_of_scope"), (context, "trust_gate")):
        for change in (lambda r: admit_replace(guest, memory_id=r.id, value="changed"),
                       lambda r: admit_archive(guest, memory_id=r.id)):
            with pytest.raises(AdmissionError) as excinfo:
                change(row)
            assert excinfo.value.code == code
    assert [r.value for r in Memory.objects.filter(archived_at__isnull=True).order_by("id")] == [
        "lives in Lisbon", "room 4B", "v", "blue umbrella"]
    assert admit_replace(guest, memory_id=note.id, value="red umbrella", category="identity").category == ""
    assert admit_archive(guest, memory_id=note.id).archived_at is not None


def test_a_guest_cannot_overwrite_a_long_term_row_of_its_conversation_by_key():
    admit_add(writer("tool"), key="room", value="room 4B", category="context")
    with pytest.raises(AdmissionError) as excinfo:
        admit_add(writer("tool", trust="guest"), key="room", value="room 13")
    assert excinfo.value.code == "trust_gate"
    assert Memory.objects.get().value == "room 4B" and Memory.objects.get().category == "context"


def test_a_guest_tool_call_without_a_conversation_reaches_no_row():
    row, _ = admit_add(writer("tool"), key="n", value="v")
    with pytest.raises(AdmissionError) as excinfo:
        admit_archive(writer("tool", trust="guest", conversation=None), memory_id=row.id)
    assert excinfo.value.code == "out_of_scope"
