"""The hand-written statements (`queries.py` of each app), on whichever database the suite runs."""

import pytest
from django.db import connection

from fermix_site import queries as site_queries
from memory import queries as memory_queries
from memory.conversations import message_append
from memory.models import Message

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
