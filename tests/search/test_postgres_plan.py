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


def test_sparse_matches_come_from_the_index_and_a_common_word_in_one_conversation_is_walked():
    one_word = plan.Pass((("pottery",),), 80)
    # A word in 1 row of 1,000: walking back would read ~80,000 rows for 80 matches.
    assert backend._by_index(one_word, {"potteri": 1_000}, 1_000_000, {"agent_id": "main"})
    # A word in every fifth row: 400 rows walked back, against 200,000 from the index.
    assert not backend._by_index(one_word, {"potteri": 200_000}, 1_000_000, {"agent_id": "main"})
    assert not backend._by_index(one_word, {}, 1_000_000, {"agent_id": "main"})
    # A word in 7,800 rows: over the agent's rows the index reads only the newest matches, so it beats
    # a walk of 10,000 rows; in one owner's rows it would fetch all 7,800, and the walk wins.
    assert backend._by_index(one_word, {"potteri": 7_800}, 1_000_000, {"agent_id": "main"})
    assert not backend._by_index(one_word, {"potteri": 7_800}, 1_000_000, {"agent_id": "main", "owner_id": "dana"})
    # In one conversation the walk is chosen by the rows it expects to read: 400 walked, or the index.
    assert backend._walk_rows(one_word, {"potteri": 200_000}, 1_000_000) <= backend.WALK_ROWS
    assert backend._walk_rows(one_word, {"potteri": 1_000}, 1_000_000) > backend.WALK_ROWS
    assert backend._walk_rows(one_word, {}, 1_000_000) is None


@pytest.fixture
def ids_given_back():
    """Restore the id sequence after the test: idf takes the highest id as the table's size, so ids
    burned here (a rollback keeps them spent) would move the relevance tests that run later."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value, is_called FROM messages_id_seq")
        last, called = cursor.fetchone()
    yield
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('messages_id_seq', %s, %s)", [last, called])


def _conversation(size, match):
    now = timezone.now()
    rows = Message.objects.bulk_create([
        Message(agent_id="main", channel="t", chat_id="7", role="user", created_at=now,
                content="walnut harbor" if match(i) else "maple ridge") for i in range(size)])
    return [m.id for m in rows]


def _newest(ids, match, count):
    return [pk for i, pk in reversed(list(enumerate(ids))) if match(i)][:count]


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL passes")
def test_a_pass_in_one_conversation_finds_its_newest_matches_walked_or_from_the_index(ids_given_back):
    def match(i):
        return i < 20 or i % 25 == 0  # many old matches, few recent ones: the walk's bound runs out
    ids = _conversation(200, match)
    filters = {"agent_id": "main", "channel": "t", "chat_id": "7", "thread_scope": "root"}
    sql, params = backend._all((("walnut",),))
    step = plan.Pass((("walnut",),), 15)
    with connection.cursor() as cursor:
        # 5 rows expected for 15 matches: the walk reads the newest 35 rows, which hold one.
        walked = backend._in_conversation(cursor, search.MESSAGES, sql, params, filters, step, walk=5.0)
        indexed = backend._in_conversation(cursor, search.MESSAGES, sql, params, filters, step, walk=None)
        other = backend._in_conversation(cursor, search.MESSAGES, sql, params, {**filters, "chat_id": "8"}, step, 5.0)
    assert walked == indexed == _newest(ids, match, 15)
    assert other == []


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL passes")
def test_an_index_pass_reads_the_newest_ids_first_and_then_the_older_ones(ids_given_back):
    def match(i):
        return i < 30 or i in (185, 195)  # the newest window holds one of the 15 wanted
    ids = _conversation(200, match)
    sql, params = backend._all((("walnut",),))
    step = plan.Pass((("walnut",),), 15)
    scope = {"agent_id": "main"}
    with connection.cursor() as cursor:
        # 5 rows expected for 15 matches: the window is the newest 10 ids.
        found = backend._from_index(cursor, search.MESSAGES, sql, params, scope, step, 5.0, ids[-1])
        whole = backend._from_index(cursor, search.MESSAGES, sql, params, scope, step, 1e6, ids[-1])
        after = backend._from_index(cursor, search.MESSAGES, sql, params, scope,
                                    plan.Pass(step.words, 15, after_id=ids[10]), 5.0, ids[-1])
    assert found == whole == _newest(ids, match, 15)
    assert after == [pk for pk in _newest(ids, match, 15) if pk > ids[10]]


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


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL passes")
def test_a_phrase_of_stop_words_is_sized_by_the_words_the_index_keeps(ids_given_back):
    _conversation(30, lambda i: True)
    Message.objects.filter(chat_id="7").update(content="they weren further along")
    query = analyse('"weren further"')
    with connection.cursor() as cursor:
        cursor.execute("SELECT max(id) FROM messages")
        max_id = cursor.fetchone()[0]
        sizes = backend._document_frequencies(cursor, search.MESSAGES, query, max_id, phrase_words=True)
    # "weren" is one of our stop words but a lexeme of `english`; "further" is a stop word of both.
    assert not query.terms and sizes == {"weren": 30}
