"""PostgreSQL's part of the plan: document frequencies from the planner's statistics, and which passes
take their matches from the GIN index instead of walking the table newest first."""

import pytest
from django.db import connection
from django.utils import timezone

from memory import search
from memory.models import Message
from memory.search import plan
from memory.search import postgres as backend
from memory.search.text import analyse


def test_one_conversation_and_sparse_matches_come_from_the_index():
    one_word = plan.Pass((("pottery",),), 80)
    assert backend._by_index(one_word, {}, 1_000_000, {"chat_id": "42"})
    # A word in 1 row of 1,000: walking back would read ~80,000 rows for 80 matches.
    assert backend._by_index(one_word, {"potteri": 1_000}, 1_000_000, {"agent_id": "main"})
    # A word in every fifth row: 400 rows walked back, against 200,000 from the index.
    assert not backend._by_index(one_word, {"potteri": 200_000}, 1_000_000, {"agent_id": "main"})
    assert not backend._by_index(one_word, {}, 1_000_000, {"agent_id": "main"})


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL planner statistics")
def test_document_frequencies_come_from_statistics_for_common_words_and_are_counted_for_rare_ones():
    now = timezone.now()
    Message.objects.bulk_create([
        Message(agent_id="main", channel="t", chat_id="1", role="user", created_at=now,
                content=f"walnut harbor {'zebra' if i % 100 == 0 else 'maple'} {'quartz' if i == 7 else ''}")
        for i in range(600)])
    try:
        _check_frequencies()
    finally:
        plan.document_frequencies.clear()
        backend.common_lexemes._entries.clear()
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE messages ALTER COLUMN search_vector SET STATISTICS -1")
        Message.objects.all().delete()


def _check_frequencies():
    with connection.cursor() as cursor:
        # A small statistics target keeps only the ten most common lexemes, as a large table keeps its
        # thousand most common: "quartz" (one row) is left out.
        cursor.execute("ALTER TABLE messages ALTER COLUMN search_vector SET STATISTICS 1")
        cursor.execute("ANALYZE messages")
        cursor.execute("SELECT max(id) FROM messages")
        max_id = cursor.fetchone()[0]
        plan.document_frequencies.clear()
        backend.common_lexemes._entries.clear()
        shares, _ = backend.common_lexemes.get(cursor, "messages")
        assert shares["walnut"] == pytest.approx(1.0) and "quartz" not in shares
        df = backend._document_frequencies(cursor, search.MESSAGES, analyse("walnut zebra quartz"), max_id)
    assert df["walnut"] == pytest.approx(max_id)  # every row: the statistics' share times the rows
    assert df["zebra"] == pytest.approx(6 * max_id / 600)
    assert df["quartz"] == 1  # outside the statistics' common words: counted through the index
    found = search.search_messages(query="zebra walnut", filters={"agent_id": "main", "chat_id": "1"})
    assert found and all("zebra" in m.content for m in found[:6])
