"""SQLite narrows a search pinned to one conversation or owner inside the index, with the scope's token,
when the scope holds few of the table's rows; a burst of the scope's newest rows (a conversation backfilled,
a busy hour of one chat) does not make it look common."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import search
from memory.models import Message
from memory.search import plan

pytestmark = pytest.mark.django_db
START = datetime(2025, 3, 1, tzinfo=UTC)


def _messages(chat: str, count: int, first: int = 0) -> list[Message]:
    return [Message(agent_id="main", role="user", content=f"note {first + i} about the garden", channel="telegram",
                    chat_id=chat, thread_scope="root", created_at=START + timedelta(minutes=first + i))
            for i in range(count)]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the scope's token is SQLite's (FTS5 columns); "
                                                         "PostgreSQL filters by its column indexes")
def test_a_burst_of_one_conversations_newest_messages_still_narrows_its_searches(monkeypatch):
    monkeypatch.setattr(plan, "DF_PROBE", 20)
    monkeypatch.setattr(plan, "CACHE_FROM_ROWS", 1000)  # frequencies kept from 1,000 rows, as from 20,000
    Message.objects.bulk_create([m for n in range(20) for m in _messages(f"c{n}", 50, 50 * n)])
    Message.objects.bulk_create(_messages("burst", 30, 1000))  # 30 of 1,030 rows, all of them the newest
    filters = {"agent_id": "main", "channel": "telegram", "chat_id": "burst", "thread_scope": "root"}
    with CaptureQueriesContext(connection) as queries:
        found = search.search_messages(query="garden", filters=filters, limit=10)
    assert len(found) == 10 and {m.chat_id for m in found} == {"burst"}
    passes = [q["sql"] for q in queries.captured_queries
              if "MATCH" in q["sql"] and "count(*)" not in q["sql"] and f"LIMIT {plan.DF_PROBE}" not in q["sql"]]
    # Its newest 20 reach back 20 rows, as if every row were the conversation's: counted, 30, it narrows.
    assert passes and all('chat_id : "burst"' in sql for sql in passes)
    counted = [q["sql"] for q in queries.captured_queries if "count(*)" in q["sql"]]
    assert sum('chat_id : "burst"' in sql for sql in counted) == 1  # (and the agent's, the channel's, `root`)
    with CaptureQueriesContext(connection) as again:
        search.search_messages(query="garden", filters=filters, limit=10)
    assert not any("count(*)" in q["sql"] for q in again.captured_queries)  # the count is kept
