"""The search schema of each database: what migration 0004 creates, and that it goes back and forth."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from memory import checks, fts
from memory.models import Message
from memory.search import search_messages


def _columns(table):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} LIMIT 0")
        return tuple(c[0] for c in cursor.description)


def _migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([("memory", target)])


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite FTS5 mirrors")
def test_the_sqlite_mirrors_index_text_and_scope_columns():
    assert _columns("messages_fts") == ("content", "agent_id", "owner_id", "channel", "chat_id", "thread_scope")
    assert _columns("memories_fts") == ("key", "value", "agent_id", "owner_id")
    assert fts.missing_triggers(connection) == []


@pytest.mark.django_db(transaction=True)
def test_migration_0004_goes_back_and_forth_and_search_follows():
    Message.objects.create(agent_id="main", channel="t", chat_id="1", role="user", content="walnut harbor",
                           created_at=timezone.now())
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("memory")[0][1]
    try:
        _migrate("0003_review_runs")
        if connection.vendor == "sqlite":
            assert _columns("messages_fts") == ("content",)
            assert fts.integrity_check(connection) == []
        else:
            assert "search_vector" not in _columns("messages")
    finally:
        _migrate(latest)
    if connection.vendor == "sqlite":
        assert fts.missing_triggers(connection) == [] and fts.integrity_check(connection) == []
    found = search_messages(query="harbor", filters={"agent_id": "main", "chat_id": "1"})
    assert [m.content for m in found] == ["walnut harbor"]
    Message.objects.all().delete()


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL BRIN index")
def test_postgres_summarises_message_pages_by_the_id_form_only_index_passes_write():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'messages_span_brin'")
        [(definition,)] = cursor.fetchall()
    # Not plain `id`: the planner would take the summary for `id = ANY(…)` over the primary key.
    assert "USING brin (((id + 0)), created_at)" in definition


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL GIN indexes")
def test_postgres_has_a_conversation_and_vector_gin_index_and_the_check_guards_it():
    assert checks.check_search_indexes() == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'messages_chat_search_idx'")
        [(definition,)] = cursor.fetchall()
    assert "USING gin (chat_id, search_vector)" in definition
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("memory")[0][1]
    try:
        _migrate("0007_messages_window_idx")
        [warning] = checks.check_search_indexes()
        assert warning.id == "memory.W002" and "messages_chat_search_idx" in warning.msg
    finally:
        _migrate(latest)
    assert checks.check_search_indexes() == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL GIN indexes")
def test_postgres_has_an_owner_and_vector_gin_index_and_the_check_guards_it():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'messages_owner_search_idx'")
        [(definition,)] = cursor.fetchall()
    assert "USING gin (owner_id, search_vector)" in definition
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("memory")[0][1]
    try:
        _migrate("0015_message_days")
        [warning] = checks.check_search_indexes()
        assert warning.id == "memory.W002"
        assert warning.msg.startswith("Search indexes missing: messages_owner_search_idx.")
    finally:
        _migrate(latest)
    assert checks.check_search_indexes() == []
