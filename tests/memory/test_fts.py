"""FTS5 mirrors stay exact through insert, update and delete; the trigger guard catches a dropped trigger."""

import random

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from memory import checks, fts
from memory.models import Message

pytestmark = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite FTS5 mirrors")

# Words whose Porter stems are all distinct, so an exact-token comparison is the right oracle.
VOCABULARY = ["zebra", "quartz", "violin", "maple", "orbit", "pixel", "tundra", "walnut", "harbor", "lemon"]


def add(content, **fields):
    return Message.objects.create(agent_id="main", channel="t", chat_id="1", role="user", content=content,
                                  created_at=timezone.now(), **fields)


def fts_ids(word, table="messages_fts"):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH %s", [fts.quote_query(word)])
        return {row[0] for row in cursor.fetchall()}


def assert_mirror_exact():
    contents = dict(Message.objects.values_list("id", "content"))
    for word in VOCABULARY:
        expected = {pk for pk, text in contents.items() if word in text.split()}
        assert fts_ids(word) == expected, word
    assert fts.integrity_check(connection) == []


@pytest.mark.django_db
def test_the_messages_mirror_stays_exact_through_insert_update_and_delete():
    rng = random.Random(7)
    rows = [add(" ".join(rng.choices(VOCABULARY, k=5))) for _ in range(120)]
    assert_mirror_exact()
    for row in rng.sample(rows, 40):
        row.content = " ".join(rng.choices(VOCABULARY, k=4))
        row.save()
    assert_mirror_exact()
    for row in rng.sample(rows, 30):
        row.delete()
    Message.objects.filter(content__contains="lemon").update(content="harbor only")
    assert_mirror_exact()


@pytest.mark.django_db
def test_an_update_that_keeps_the_content_leaves_the_index_alone():
    row = add("walnut maple")
    row.kind = "notice"
    row.save()
    assert fts_ids("walnut") == {row.id}
    assert fts.integrity_check(connection) == []


@pytest.mark.django_db
def test_the_memories_mirror_indexes_key_and_value():
    from memory.rows import memory_archive, memory_upsert

    row, _ = memory_upsert(agent_id="main", owner_id="default", scope_type="owner", scope_id="default",
                           key="instrument", value="plays the violin", category="interest", actor_type="operator")
    assert fts_ids("violin", "memories_fts") == {row.id}
    assert fts_ids("instrument", "memories_fts") == {row.id}
    memory_upsert(agent_id="main", owner_id="default", scope_type="owner", scope_id="default",
                  key="instrument", value="plays the harbor organ", category="interest", actor_type="operator")
    assert fts_ids("violin", "memories_fts") == set()
    assert fts_ids("harbor", "memories_fts") == {row.id}
    memory_archive(memory_id=row.id, archived_by="operator", reason="test")
    assert fts.integrity_check(connection) == []


@pytest.mark.django_db
@pytest.mark.parametrize("query", ['"', "C++", "node.js", "AND", "(", "NOT OR", "a:b", "col:umn*", "^x", "🙂 emoji",
                                   "naïve café", "'; DROP TABLE messages; --", "NEAR(a b)", ""])
def test_any_user_text_is_a_valid_query(query):
    add("C++ and node.js notes about a naïve café 🙂")
    with connection.cursor() as cursor:
        quoted = fts.quote_query(query)
        if quoted:
            cursor.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH %s", [quoted])
            assert cursor.fetchone()[0] in (0, 1)
    assert fts_ids("node.js") == set(Message.objects.values_list("id", flat=True))


@pytest.mark.django_db(transaction=True)
def test_the_guard_catches_triggers_dropped_by_a_table_rebuild():
    add("pixel before the rebuild")
    assert checks.check_fts_triggers() == []

    # A schema change Django performs on SQLite by rebuilding the table drops its triggers.
    old_field = Message._meta.get_field("sender")
    new_field = Message._meta.get_field("sender").clone()
    new_field.set_attributes_from_name("sender")
    new_field.max_length = 300
    with connection.schema_editor() as editor:
        editor.alter_field(Message, old_field, new_field)

    errors = checks.check_fts_triggers()
    assert [e.id for e in errors] == ["memory.E001"]
    assert "messages_fts_ai" in errors[0].msg and "rebuild_search_index" in errors[0].hint
    unseen = add("pixel written while the trigger was gone")
    assert unseen.id not in fts_ids("pixel")

    call_command("rebuild_search_index")
    assert checks.check_fts_triggers() == []
    assert_mirror_exact()
    assert unseen.id in fts_ids("pixel")
    with connection.schema_editor() as editor:
        editor.alter_field(Message, new_field, old_field)
    call_command("rebuild_search_index")


@pytest.mark.django_db(transaction=True)
def test_migrate_repairs_dropped_triggers_itself():
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER messages_fts_au")
    assert fts.missing_triggers(connection) == ["messages_fts_au"]
    call_command("migrate", verbosity=0)
    assert fts.missing_triggers(connection) == []


@pytest.mark.django_db(transaction=True)
def test_optimize_merges_the_segments_in_steps_and_keeps_the_index_exact(capsys):
    from django_q.models import Schedule

    from memory.tasks import optimize_search_index

    rng = random.Random(3)
    for _ in range(60):  # one committed transaction each: FTS5 writes a small segment for each
        add(" ".join(rng.choice(VOCABULARY) for _ in range(6)))
    mirror = fts.MIRROR["messages"]
    spread = fts.segments(connection, mirror)
    assert spread > fts.OPTIMIZE_ABOVE_SEGMENTS

    assert optimize_search_index()["messages_fts"] == 1
    assert fts.segments(connection, mirror) == 1
    assert_mirror_exact()
    assert Schedule.objects.get(name="fermix-search-index-optimize").func == "memory.tasks.optimize_search_index"

    add("walnut harbor")  # a new segment beside the merged one: below the threshold, the task leaves it
    assert optimize_search_index()["messages_fts"] == 2
    call_command("rebuild_search_index", "--optimize")
    assert "messages_fts (1 segment)" in capsys.readouterr().out
    assert_mirror_exact()
