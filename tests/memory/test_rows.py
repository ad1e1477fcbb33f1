"""Memory rows: upsert by the unique key, replace, archive, restore, list, and each change's history."""

import pytest
from django.db import IntegrityError, transaction

from memory.models import Memory
from memory.rows import (
    MemoryRowError,
    memory_archive,
    memory_history,
    memory_list,
    memory_replace,
    memory_restore,
    memory_upsert,
)

pytestmark = pytest.mark.django_db


def upsert(key="city", value="lives in Lisbon", category="identity", **fields):
    fields = {"agent_id": "main", "owner_id": "ana", "scope_type": "owner", "scope_id": "ana",
              "actor_type": "operator", **fields}
    return memory_upsert(key=key, value=value, category=category, **fields)


def test_upsert_adds_then_replaces_by_the_unique_key():
    row, action = upsert()
    assert action == "add" and row.promote_target == "user_md"
    same, action = upsert(value="lives in Porto")
    assert (same.pk, action, same.value) == (row.pk, "replace", "lives in Porto")
    assert upsert(value="lives in Porto")[1] == "unchanged"
    assert Memory.objects.count() == 1


def test_the_database_refuses_a_duplicate_key():
    upsert()
    row = Memory.objects.get()
    row.pk = None
    with pytest.raises(IntegrityError), transaction.atomic():
        row.save()


def test_a_value_over_200_characters_is_refused_on_every_write_path():
    with pytest.raises(MemoryRowError) as excinfo:
        upsert(value="x" * 201)
    assert excinfo.value.code == "value_too_long" and "shorten" in str(excinfo.value)
    row, _ = upsert(value="x" * 200)
    with pytest.raises(MemoryRowError) as excinfo:
        memory_replace(memory_id=row.id, value="y" * 201, actor_type="reviewer")
    assert excinfo.value.code == "value_too_long"
    assert Memory.objects.get().value == "x" * 200


@pytest.mark.parametrize("fields, code", [
    ({"category": "gossip"}, "invalid_category"),
    ({"scope_type": "planet"}, "invalid_scope"),
    ({"owner_id": "../x"}, "invalid_owner"),
    ({"key": " "}, "invalid_key"),
    ({"value": ""}, "invalid_value"),
    ({"actor_type": "stranger"}, "invalid_actor"),
    ({"confidence": 2}, "invalid_confidence"),
])
def test_invalid_rows_are_refused(fields, code):
    with pytest.raises(MemoryRowError) as excinfo:
        upsert(**fields)
    assert excinfo.value.code == code
    assert Memory.objects.count() == 0


def test_archive_and_restore_keep_the_row_and_record_who_and_why():
    row, _ = upsert()
    archived = memory_archive(memory_id=row.id, archived_by="operator:ana", reason="moved away")
    assert archived.archived_at is not None
    assert (archived.archived_by, archived.archive_reason) == ("operator:ana", "moved away")
    assert list(memory_list(agent_id="main")) == []
    assert list(memory_list(agent_id="main", archived=True)) == [archived]
    with pytest.raises(MemoryRowError) as excinfo:
        memory_archive(memory_id=row.id, archived_by="x")
    assert excinfo.value.code == "already_archived"

    restored = memory_restore(memory_id=row.id, actor_id="ana")
    assert restored.archived_at is None and restored.archived_by == ""
    assert list(memory_list(agent_id="main")) == [restored]
    with pytest.raises(MemoryRowError) as excinfo:
        memory_restore(memory_id=row.id)
    assert excinfo.value.code == "not_archived"


def test_replace_refuses_archived_and_unknown_rows():
    row, _ = upsert()
    memory_archive(memory_id=row.id, archived_by="x")
    with pytest.raises(MemoryRowError) as excinfo:
        memory_replace(memory_id=row.id, value="new", actor_type="reviewer")
    assert excinfo.value.code == "archived"
    with pytest.raises(MemoryRowError) as excinfo:
        memory_replace(memory_id=999999, value="new", actor_type="reviewer")
    assert excinfo.value.code == "not_found"


def test_list_filters_by_scope_and_category_newest_first():
    upsert(key="a", value="A", category="identity")
    upsert(key="b", value="B", category="context", scope_type="agent", scope_id="main")
    upsert(key="c", value="C", category="identity", owner_id="bo", scope_id="bo")
    assert [r.key for r in memory_list(agent_id="main")] == ["c", "b", "a"]
    assert [r.key for r in memory_list(agent_id="main", owner_id="ana")] == ["b", "a"]
    assert [r.key for r in memory_list(agent_id="main", category="identity")] == ["c", "a"]
    assert [r.key for r in memory_list(agent_id="main", scope_type="agent")] == ["b"]
    assert [r.promote_target for r in memory_list(agent_id="main", scope_type="agent")] == ["memory_md"]


def test_every_change_appends_to_the_rows_history_which_survives_archive():
    row, _ = upsert(value="lives in Lisbon")
    upsert(value="lives in Porto", actor_type="reviewer", actor_id="run:3", reason="user moved")
    memory_archive(memory_id=row.id, archived_by="operator", reason="stale")
    upsert(value="lives in Faro", actor_type="tool", actor_id="memory_store")
    memory_replace(memory_id=row.id, value="lives in Faro, Portugal", actor_type="operator")
    memory_archive(memory_id=row.id, archived_by="operator", reason="again")
    memory_restore(memory_id=row.id, actor_id="ana", reason="was right")
    events = [(e.action, e.before_value, e.after_value, e.actor_type, e.actor_id, e.reason)
              for e in memory_history(memory_id=row.id)]
    assert events == [
        ("add", None, "lives in Lisbon", "operator", "", ""),
        ("replace", "lives in Lisbon", "lives in Porto", "reviewer", "run:3", "user moved"),
        ("archive", "lives in Porto", "lives in Porto", "operator", "operator", "stale"),
        ("resave", "lives in Porto", "lives in Faro", "tool", "memory_store", ""),
        ("replace", "lives in Faro", "lives in Faro, Portugal", "operator", "", ""),
        ("archive", "lives in Faro, Portugal", "lives in Faro, Portugal", "operator", "operator", "again"),
        ("restore", "lives in Faro, Portugal", "lives in Faro, Portugal", "operator", "ana", "was right"),
    ]
