"""The hand-written statements (`queries.py` of each app), on whichever database the suite runs."""

import pytest
from django.db import connection
from django.utils import timezone

from fermix_site import queries as site_queries
from memory import queries as memory_queries
from memory.conversations import ConversationKey, message_append
from memory.models import Conversation, Message
from memory.prompt_files import FILES
from tests.memory_factories import fact

pytestmark = [pytest.mark.django_db]


def test_the_generation_upsert_creates_then_counts_up():
    assert site_queries.generation_bump(connection, "test:one") == 1
    assert site_queries.generation_bump(connection, "test:one") == 2
    assert site_queries.generation_bump(connection, "test:two") == 1


def test_the_database_answers():
    site_queries.database_answers(connection)


def test_a_table_estimate_is_close_to_its_rows(home):
    for n in range(3):
        message_append(agent_id="main", conversation="telegram:1", role="user", content=f"m{n}")
    estimate = site_queries.table_estimate(connection, Message._meta.db_table)
    # The highest id, or PostgreSQL's statistics once they exist (none before an ANALYZE: then the id).
    assert estimate == Message.objects.order_by("-id").values_list("id", flat=True).first()
    assert site_queries.table_estimate(connection, "no_such_table") == 0


def test_the_catalogue_reads_of_the_checks():
    if connection.vendor == "sqlite":
        assert memory_queries.journal_mode(connection)[0][0].lower() in {"wal", "memory"}
    else:
        tables = {table for table, _ in memory_queries.search_indexes(connection)}
        assert tables == set(memory_queries.SEARCH_TABLES)


def test_a_message_inserted_by_hand_reads_back_as_the_orm_writes_it(home):
    assert not memory_queries.conversation_exists("main", "telegram:1:root")
    Conversation.objects.create(agent_id="main", key="telegram:1:root", channel="telegram", chat_id="1")
    assert memory_queries.conversation_exists("main", "telegram:1:root")
    at = timezone.now()
    message = memory_queries.insert_message(Message(
        agent_id="main", owner_id="ana", channel="telegram", chat_id="1", role="user", content="olá",
        metadata={"n": 1, "tags": ["a"]}, created_at=at))
    stored = Message.objects.get(pk=message.pk)
    assert (stored.content, stored.metadata, stored.created_at, stored.thread_scope, stored.kind) == (
        "olá", {"n": 1, "tags": ["a"]}, at, "root", "chat")


def test_the_window_statements_read_from_the_start_and_the_head(home):
    key = ConversationKey.parse("telegram:1")
    said = [message_append(agent_id="main", conversation=key, role="user", content=f"m{n}",
                           metadata={"n": n}) for n in range(4)]
    other = message_append(agent_id="main", conversation="telegram:2", role="user", content="elsewhere")
    Conversation.objects.filter(agent_id="main", key=str(key)).update(
        window_start_id=said[2].id, pinned_message_ids=[said[0].id])
    head, found = memory_queries.window_load("main", key)
    assert head == memory_queries.WindowHead(said[2].id, None, [said[0].id])
    assert sorted(m.id for m in found) == [said[0].id, said[2].id, said[3].id]
    assert other.id not in {m.id for m in found}
    by_id = {m.id: m for m in found}
    for message in (said[0], said[3]):  # every field as the ORM reads it: aware datetimes, decoded JSON
        stored = Message.objects.get(pk=message.id)
        read = by_id[message.id]
        assert {f.attname: getattr(read, f.attname) for f in Message._meta.concrete_fields} == {
            f.attname: getattr(stored, f.attname) for f in Message._meta.concrete_fields}
        assert read.created_at.tzinfo is not None and read._state.adding is False
    assert memory_queries.window_load("main", ConversationKey.parse("telegram:9")) is None


def test_a_files_rows_are_each_sections_newest_up_to_its_cap(home):
    rows = [fact(f"k{n}", f"value {n}", "identity", minute=n) for n in range(8)]
    fact("goal", "run a marathon", "goal")
    fact("other", "not the owner", "identity", owner="bo")
    found = memory_queries.file_rows("main", "default", FILES["user_md"])
    identity = [r.id for r in found if r.category == "identity"]
    assert identity == [r.id for r in reversed(rows)][:6]
    assert [r.value for r in found if r.category == "goal"] == ["run a marathon"]
