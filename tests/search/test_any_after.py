"""`any_after`: whether a row of a scope past an id passes the filters, walked through the scope's own index."""

import pytest
from django.db import connection
from django.utils import timezone

from memory.models import Message
from memory.search import any_after

pytestmark = pytest.mark.django_db
CONVERSATION = {"agent_id": "main", "channel": "telegram", "chat_id": "1", "thread_scope": "root"}


def said(chat="1", owner="dana", kind="chat"):
    return Message.objects.create(agent_id="main", owner_id=owner, channel="telegram", chat_id=chat,
                                  thread_scope="root", role="user", kind=kind, content="hello",
                                  created_at=timezone.now())


def test_a_newer_row_counts_only_in_its_own_scope_and_when_it_passes_the_other_filters():
    mine = said()
    said(chat="2", owner="bo")  # newer, another conversation and owner
    assert not any_after("messages", mine.id, CONVERSATION)
    assert not any_after("messages", mine.id, {"agent_id": "main", "owner_id": "dana"})
    assert any_after("messages", mine.id, {"agent_id": "main"})
    said(kind="event")
    assert not any_after("messages", mine.id, {**CONVERSATION, "kind": ["chat", "voice"]})
    assert any_after("messages", mine.id, CONVERSATION)
    assert any_after("messages", mine.id, {"agent_id": "main", "owner_id": "dana"})


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query plan (PostgreSQL plans by statistics)")
def test_a_conversation_or_an_owner_is_walked_through_its_index_not_the_whole_table():
    statements = []

    def capture(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        any_after("messages", 0, {**CONVERSATION, "kind": ["chat"]})
        any_after("messages", 0, {"agent_id": "main", "owner_id": "dana"})
    details = []
    with connection.cursor() as cursor:
        for sql, params in statements:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            details.append(" ".join(str(row[-1]) for row in cursor.fetchall()))
    assert "messages_window_idx" in details[0] and "id>?" in details[0]
    assert "messages_owner_idx" in details[1] and "id>?" in details[1]
