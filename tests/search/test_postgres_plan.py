"""PostgreSQL's part of the plan: document frequencies from the planner's statistics, and which passes
take their matches from the GIN index instead of walking the table newest first."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory import days, search
from memory.models import Message
from memory.search import Corpus, plan
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
    # a walk of 10,000 rows; in one owner's rows the planner is left to choose (at a million messages it
    # takes the owner's matches from `messages_owner_search_idx`).
    assert backend._by_index(one_word, {"potteri": 7_800}, 1_000_000, {"agent_id": "main"})
    assert not backend._by_index(one_word, {"potteri": 7_800}, 1_000_000, {"agent_id": "main", "owner_id": "dana"})
    # In one conversation the walk is chosen by the rows it expects to read: 400 walked, or the index.
    assert backend._walk_rows(one_word, {"potteri": 200_000}, 1_000_000) <= backend.WALK_ROWS
    assert backend._walk_rows(one_word, {"potteri": 1_000}, 1_000_000) > backend.WALK_ROWS
    assert backend._walk_rows(one_word, {}, 1_000_000) is None


def test_a_pass_of_several_words_expects_them_together_in_fewer_rows_than_its_rarest():
    pair = plan.Pass((("walnut",), ("harbor",)), 40)
    phrase = plan.Pass((("walnut", "harbor"),), 40)
    rows = 1_000_000
    # Two words in 2,000 rows each: taken as independent they meet in 4 rows, but words that meet are
    # rarely independent, so the pass expects at least 1/CORRELATION of the rarest's rows (62.5).
    assert backend._walk_rows(pair, {"walnut": 2_000, "harbor": 2_000}, rows) == 40 * rows / (2_000 / 32)
    # Two common words: independent, 100,000 × 200,000 / 1,000,000 = 20,000 rows hold both.
    assert backend._walk_rows(pair, {"walnut": 100_000, "harbor": 200_000}, rows) == pytest.approx(40 * rows / 20_000)
    # A phrase is one item: no rarer than its rarest word.
    assert backend._walk_rows(phrase, {"walnut": 2_000, "harbor": 2_000}, rows) == 40 * rows / 2_000


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
        def run(scope, walk):
            return backend._run(cursor, [(step, backend._in_conversation(search.MESSAGES, sql, params, scope, step,
                                                                         walk))])[0]
        walked, indexed, other = run(filters, 5.0), run(filters, None), run({**filters, "chat_id": "8"}, 5.0)
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
    def newest(step, walk):
        return backend._run(cursor, [(step, backend._windows(search.MESSAGES, sql, params, scope, step, walk,
                                                             ids[-1]))])[0]
    with connection.cursor() as cursor:
        # 5 rows expected for 15 matches: the window is the newest 10 ids.
        found, whole = newest(step, 5.0), newest(step, 1e6)
        after = newest(plan.Pass(step.words, 15, after_id=ids[10]), 5.0)
    assert found == whole == _newest(ids, match, 15)
    assert after == [pk for pk in _newest(ids, match, 15) if pk > ids[10]]


def test_an_index_pass_short_of_a_few_matches_reads_only_the_older_ids_they_should_be_in():
    step = plan.Pass((("walnut",),), 80)
    sql, params = backend._all(step.words)
    statements = backend._windows(search.MESSAGES, sql, params, {"agent_id": "main"}, step, 10_000.0, 1_000_000)
    # 80 matches expected in the newest 10,000 ids: the first window is twice that.
    assert statements([])[1][-2:] == [980_000, 80]
    # 79 found in those 20,000 ids: the last one should be within 253 more; twice that are read.
    assert statements(list(range(79)))[1][-3:] == [979_493, 980_001, 1]
    # None found there: the same density again, over the 20,507 ids read so far.
    assert statements(list(range(79)))[1][-3:] == [978_973, 979_494, 1]
    # A pass that has found nothing reads four times the ids read so far, down to its floor, no further.
    floored = backend._windows(search.MESSAGES, sql, params, {"agent_id": "main"},
                               plan.Pass(step.words, 80, after_id=950_000), 10_000.0, 1_000_000)
    assert floored([])[1][-2:] == [980_000, 80]
    assert floored([])[1][-3:] == [950_000, 980_001, 80]
    assert floored([]) is None


def test_a_walked_pass_over_the_agent_s_rows_walks_a_bounded_window_then_reads_on_from_the_index():
    step = plan.Pass((("walnut", "harbor"),), 100)
    sql, params = backend._all(step.words)

    def statements(walk):
        return backend._windows(search.MESSAGES, sql, params, {"agent_id": "main"}, step, walk, 1_000_000,
                                walked_first=True)

    # 100 matches expected in the newest 5,000 rows: the walk reads four times that, the ids' count its
    # LIMIT, so it stops there however rare the phrase turns out to be.
    walked = statements(5_000.0)
    first = walked([])
    assert "ORDER BY t.id DESC LIMIT %s) w WHERE w.search_vector @@" in first[0]
    assert first[1][-4:] == [980_000, 20_000, "walnut harbor", 100]
    # 10 found there: the 90 missing should be in 180,000 more ids; the index reads twice that, older.
    assert walked(list(range(10)))[1][-3:] == [620_000, 980_001, 90]
    # A walk expecting its matches in 200 rows still reads WALK_FLOOR of them before the index.
    assert statements(200.0)([])[1][-4:-2] == [1_000_000 - backend.WALK_FLOOR, backend.WALK_FLOOR]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL planner statistics")
def test_a_phrase_rarer_than_its_words_is_walked_no_further_than_its_bound(ids_given_back):
    # "walnut" and "harbor" each in 11,000 of 20,000 rows, side by side only in the oldest 2,000: the
    # phrase is taken as common as its words (100 matches in the newest 182 rows) and is not. Walked
    # unbounded, the pass read 18,000 rows to find them (at a million rows such walks took 90–160 ms).
    now = timezone.now()
    Message.objects.bulk_create([
        Message(agent_id="main", channel="t", chat_id=str(i % 40), role="user", created_at=now,
                content="walnut harbor maple" if i < 2_000 else "walnut maple harbor" if i % 2 == 0 else "ridge")
        for i in range(20_000)], batch_size=2_000)
    try:
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE messages")
        plan.document_frequencies.clear()
        backend.common_lexemes.clear()  # the statistics of these rows, not of an earlier test's
        filters = {"agent_id": "main"}
        phrase = list(Message.objects.filter(content__startswith="walnut harbor").order_by("-id")
                      .values_list("id", flat=True))
        with CaptureQueriesContext(connection) as sent:
            found = [hit.id for hit in backend.search(search.MESSAGES, analyse('"walnut harbor"'), filters, 20)]
        assert found == phrase[:20]
        walks = [q["sql"] for q in sent if ") w WHERE w.search_vector @@" in q["sql"]]
        assert len(walks) == 1, [q["sql"] for q in sent]

        step = plan.Pass((("walnut", "harbor"),), plan.PHRASE_LIMIT)
        max_id = phrase[0] + 18_000
        sizes = {"walnut": 11_000, "harbor": 11_000}
        walk = backend._walk_rows(step, sizes, max_id)
        assert not backend._by_index(step, sizes, max_id, filters)  # taken for a common phrase
        sql, params = backend._all(step.words)
        with CaptureQueriesContext(connection) as sent, connection.cursor() as cursor:
            ids = backend._run(cursor, [(step, backend._windows(search.MESSAGES, sql, params, filters, step, walk,
                                                                max_id, walked_first=True))])[0]
        assert ids == phrase[:plan.PHRASE_LIMIT]
        # The walk: the newest WALK_FLOOR rows one by one, no more; then the index, for the older ids.
        assert len(sent) == 2
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sent[0]['sql']}")
            scans = _scans(cursor.fetchone()[0][0]["Plan"])
        walked = [x for x in scans if x.get("Index Name") == "messages_pkey"]
        assert [x["Scan Direction"] for x in walked] == ["Backward"], scans
        assert walked[0]["Actual Rows"] == backend.WALK_FLOOR
    finally:
        plan.document_frequencies.clear()
        backend.common_lexemes.clear()
        Message.objects.all().delete()


def test_an_index_pass_narrows_to_its_pages_by_their_summaries_while_its_window_is_wide_for_its_matches():
    step = plan.Pass((("walnut",),), 80)
    sql, params = backend._all(step.words)

    def first_statement(corpus, walk):
        return backend._windows(corpus, sql, params, {"agent_id": "main"}, step, walk, 1_000_000)([])[0]

    # A word in 800 rows: 200,000 ids for its 160 newest matches, the summaries pick their pages.
    assert "t.id + 0 > %s" in first_statement(search.MESSAGES, 100_000.0)
    # A word in 8,000 rows: 20,000 ids would be intersected page by page; its own rows are cheaper.
    assert "t.id > %s" in first_statement(search.MESSAGES, 10_000.0)
    assert "t.id > %s" in first_statement(search.MEMORIES, 100_000.0)  # no summaries of memory rows


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL passes")
def test_passes_sent_together_find_what_each_finds_alone_in_one_round_trip(ids_given_back):
    def match(i):
        return i < 30 or i in (185, 195)  # "walnut harbor"; every other row "maple ridge"
    ids = _conversation(200, match)
    scope = {"agent_id": "main"}
    steps = [plan.Pass((("walnut",),), 15), plan.Pass((("maple",),), 10),
             plan.Pass((("walnut",), ("harbor",)), 5, after_id=ids[10])]

    def statements(step):
        sql, params = backend._all(step.words)
        # The first pass expects its matches among the newest 10 ids, which hold one: it reads on, older.
        walk = 5.0 if step is steps[0] else 1e6
        return step, backend._windows(search.MESSAGES, sql, params, scope, step, walk, ids[-1])

    with CaptureQueriesContext(connection) as sent, connection.cursor() as cursor:
        together = backend._run(cursor, [statements(step) for step in steps])
    with connection.cursor() as cursor:
        alone = [backend._run(cursor, [statements(step)])[0] for step in steps]
    assert together == alone == [_newest(ids, match, 15), _newest(ids, lambda i: not match(i), 10),
                                 [pk for pk in _newest(ids, match, 5) if pk > ids[10]]]
    # One statement for the three first windows, then one for the first pass's older ids, where its 14
    # missing matches should be at the density of its first window (1 in 10 ids): all of them.
    assert len(sent) == 2 and "UNION ALL" in sent[0]["sql"]


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL probe")
def test_a_word_past_the_probe_is_estimated_from_how_far_its_first_matches_reach():
    with connection.cursor() as cursor:
        # About 18 rows a page, as messages of a few dozen words: "walnut" in every eighth of 2,000 rows.
        cursor.execute("CREATE TEMP TABLE probed AS SELECT i AS id, to_tsvector('english', "
                       "CASE WHEN i % 8 = 0 THEN 'walnut ' ELSE '' END || CASE WHEN i < 30 THEN 'quartz ' ELSE '' "
                       "END || repeat('maple ridge ', 30)) AS search_vector FROM generate_series(1, 2000) AS i")
        found = backend._probe(cursor, Corpus(Message, "probed", ("content",), "created_at"),
                               ["walnut", "quartz", "zebra"])
    assert found["walnut"] == pytest.approx(250, rel=0.2)  # 50 matches in the first fifth of the pages
    assert found["quartz"] == 29 and found["zebra"] == 0  # fewer than the probe: counted


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
        backend.common_lexemes.clear()
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
        backend.common_lexemes.clear()
        shares, _ = backend.common_lexemes.get(cursor, "messages")
        assert shares["walnut"] == pytest.approx(1.0) and "quartz" not in shares
        _, df, _ = backend._document_frequencies(cursor, search.MESSAGES, analyse("walnut zebra quartz"))
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
        _, _, sizes = backend._document_frequencies(cursor, search.MESSAGES, query)
    # "weren" is one of our stop words but a lexeme of `english`; "further" is a stop word of both.
    assert not query.terms and sizes == {"weren": 30}


def test_an_owner_with_many_more_rows_than_a_pass_has_matches_reads_the_matches_and_filters_them():
    word = plan.Pass((("finemibe",),), 80)
    # An owner of 900,000 rows of a million: walking the owner's posting list beside the word's costs
    # more than reading the word's matches (194 rows: 1.9 ms against 0.4; 5,781: 9.6 against 5.2).
    assert backend._fenced(word, {"finemib": 194}, 900_000)
    assert backend._fenced(word, {"finemib": 5_781}, 900_000)
    # The largest owner of the benchmark's million messages (42,236 rows) and a word in 2,276 rows: the
    # owner's index hands over its 78 matches (1.3 ms against 11.7).
    assert not backend._fenced(word, {"finemib": 2_276}, 42_236)
    assert not backend._fenced(word, {"finemib": 731}, 0.0)  # outside the statistics: smaller still
    assert not backend._fenced(word, {}, 900_000)


def test_an_owner_of_most_rows_is_searched_as_the_agent_is_with_the_owner_filter_outside_the_window():
    word = plan.Pass((("finemibe",),), 80)
    owner = {"agent_id": "main", "owner_id": "dana"}
    # Half the rows or more: the newest ids holding twice the pass's limit of any owner's matches hold
    # about the owner's limit, so the pass reads windows of the newest ids as an agent's pass does.
    assert backend._most_rows(900_000, 1_000_000) and backend._most_rows(500_000, 1_000_000)
    assert not backend._most_rows(420_000, 1_000_000) and not backend._most_rows(0.0, 0)
    assert backend._agent_wide(owner, most_rows=True) and not backend._agent_wide(owner)
    assert not backend._agent_wide({**owner, "created_at__gte": timezone.now()}, most_rows=True)
    # A word in 7,800 rows: windows of the newest ids, not the planner's choice, for such an owner.
    assert backend._by_index(word, {"finemib": 7_800}, 1_000_000, owner, most_rows=True)
    assert not backend._by_index(word, {"finemib": 7_800}, 1_000_000, owner)
    sql, params = backend._all(word.words)
    statement, values = backend._windows(search.MESSAGES, sql, params, owner, word, 10_000.0, 1_000_000,
                                         fenced=True)([])
    assert "OFFSET 0) t WHERE" in statement and values[-2:] == ["dana", 80]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL planner statistics")
def test_an_owner_s_pass_is_read_by_the_size_the_statistics_know_for_the_owner(ids_given_back):
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('messages_id_seq', 1, false)")  # the windows are of the table's ids
    now = timezone.now()
    # 20,000 rows: "big" holds 60 %, "mid" 30 %, 50 small owners the rest (each row a conversation of
    # its own, so no reply joins the hits); "zebra" is in 800 rows, "quokka" in 29.
    Message.objects.bulk_create([
        Message(agent_id="main", channel="t", chat_id=str(i % 7 if i % 10 < 9 else i), role="user", created_at=now,
                owner_id="big" if i % 10 < 6 else "mid" if i % 10 < 9 else f"small{i % 50}",
                content=f"walnut harbor {'zebra' if i % 25 == 3 else 'quokka' if i % 667 == 9 else 'maple'} {i}")
        for i in range(20_000)], batch_size=2_000)
    try:
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE messages")
        backend.common_owners.clear()
        plan.document_frequencies.clear()
        # "big": an owner of most rows is searched as the agent is, newest ids first, its filter outside
        # the window: the heap hands over the newest of the word's matches (160 for a pass of 80), not
        # all 800. "mid": more rows than 150 a match, so the word's matches are read and filtered.
        # "small9": from the owner's own index.
        for owner, word, fenced, windowed in (("big", "zebra", True, True), ("mid", "quokka", True, False),
                                              ("small9", "quokka", False, False)):
            filters = {"agent_id": "main", "owner_id": owner}
            with CaptureQueriesContext(connection) as sent:
                found = [row.id for row in search.search_messages(query=word, filters=filters, limit=5)]
            expected = list(Message.objects.filter(content__contains=word, **filters).order_by("-id")
                            .values_list("id", flat=True))
            matches = Message.objects.filter(content__contains=word).count()
            assert expected and sorted(found) == sorted(expected[:5]), owner
            passes = [q["sql"] for q in sent if "search_vector @@" in q["sql"] and "ORDER BY t.id + 0" in q["sql"]]
            assert passes and all(("OFFSET 0) t WHERE" in sql) == fenced for sql in passes), owner
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {passes[0]}")
                scans = _scans(cursor.fetchone()[0][0]["Plan"])
            # The rows the fence hands over, else those the heap does.
            fence = [s["Plans"][0] for s in scans if s["Node Type"] == "Subquery Scan"]
            read = (fence or [s for s in scans if s["Node Type"] == "Bitmap Heap Scan"])[0]["Actual Rows"]
            assert (read < matches / 2) if windowed else (read == (matches if fenced else len(expected))), (owner, read)
    finally:
        backend.common_owners.clear()
        plan.document_frequencies.clear()
        Message.objects.all().delete()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL planner")
def test_an_owner_s_pass_reads_only_the_owner_s_matches_from_one_index():
    now = timezone.now()
    # "dana": 5,000 of 20,000 rows, 20 of them with "zebra"; the other 15,000 rows, of 31 owners, hold
    # "zebra" 250 times: most of the word's matches are other owners', as a word's are at scale.
    Message.objects.bulk_create([
        Message(agent_id="main", channel="t", chat_id=str(i % 400), role="user", created_at=now,
                owner_id="dana" if i % 4 == 0 else f"other{i % 31}",
                content=f"walnut harbor {'zebra' if i % 1_000 == 0 or i % 4 and i % 80 == 1 else 'maple'} {i}")
        for i in range(20_000)], batch_size=2_000)
    try:
        with connection.cursor() as cursor:
            # Merges the GIN indexes' lists of new entries into them, as autovacuum does on a live table.
            cursor.execute("VACUUM ANALYZE messages")
        plan.document_frequencies.clear()
        for owner in ("dana", "other5"):
            filters = {"agent_id": "main", "owner_id": owner}
            with CaptureQueriesContext(connection) as sent:
                found = [row.id for row in search.search_messages(query="zebra", filters=filters, limit=20)]
            expected = list(Message.objects.filter(content__contains="zebra", **filters).order_by("-id")
                            .values_list("id", flat=True))
            assert expected and sorted(found) == sorted(expected[:20]), owner
            passes = [q["sql"] for q in sent if "search_vector @@" in q["sql"] and "ORDER BY t.id" in q["sql"]
                      and "ranked" not in q["sql"]]
            assert passes, owner
            for sql in passes:
                with connection.cursor() as cursor:
                    cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
                    scans = _scans(cursor.fetchone()[0][0]["Plan"])
                # The owner's and the word's posting lists are intersected in the index: the heap
                # hands over the owner's matches of the word and nothing else.
                used = [(x["Node Type"], x.get("Index Name"), x["Actual Rows"]) for x in scans]
                assert [index for _, index, _ in used if index] == ["messages_owner_search_idx"], (owner, used)
                heap = [s for s in scans if s["Node Type"] == "Bitmap Heap Scan"]
                assert heap and heap[0]["Actual Rows"] == len(expected), (owner, used)
    finally:
        plan.document_frequencies.clear()
        Message.objects.all().delete()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL planner statistics")
def test_a_walked_pass_in_a_time_span_walks_the_span_s_ids_and_checks_the_time_outside(ids_given_back):
    start = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=30)
    # 20 days of 1,000 messages each; "walnut" in every fourth (a common word: walked), "quokka" in
    # 12 rows of the tenth day (sparse: from the index). A day's ids, widened to blocks of 256, take in
    # some of the days beside it, so the time still has to be checked.
    Message.objects.bulk_create([
        Message(agent_id="main", channel="t", chat_id=str(i % 40), role="user",
                created_at=start + timedelta(days=i // 1_000, seconds=i % 1_000),
                content=f"{'walnut' if i % 4 == 0 else 'maple'} "
                        f"{'quokka' if i // 1_000 == 10 and i % 83 == 5 else 'ridge'}")
        for i in range(20_000)], batch_size=2_000)
    try:
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE messages")
        plan.document_frequencies.clear()
        day = {"created_at__gte": start + timedelta(days=10), "created_at__lt": start + timedelta(days=11)}
        filters = {"agent_id": "main", **day}
        with connection.cursor() as cursor:
            low, high = days.span_ids(cursor, "messages", filters)
        in_day = Message.objects.filter(**filters)
        assert Message.objects.filter(id__gte=low, id__lte=high).count() > in_day.count()  # the span is wider
        for word, walked in (("walnut", True), ("quokka", False)):
            with CaptureQueriesContext(connection) as sent:
                found = [hit.id for hit in backend.search(search.MESSAGES, analyse(word), filters, 20)]
            matches = list(in_day.filter(content__contains=word).order_by("-id").values_list("id", flat=True))
            assert found and set(found) <= set(matches), word
            passes = [q["sql"] for q in sent if "search_vector @@" in q["sql"] and "ranked" not in q["sql"]
                      and "tsvector_to_array" not in q["sql"] and "LIMIT 50" not in q["sql"]]
            assert len(passes) == 1, passes
            # Walked: the span's ids newest first, the time checked outside the fence; sparse: the index.
            assert ("OFFSET 0) w WHERE" in passes[0]) == walked, (word, passes[0])
            with connection.cursor() as cursor:
                cursor.execute(passes[0])
                assert [row[0] for row in cursor.fetchall()] == matches[:plan.TERM_LIMIT], word
                cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {passes[0]}")
                scans = _scans(cursor.fetchone()[0][0]["Plan"])
            if walked:  # the newest ids read one by one until the pass has its matches, no page lossy
                assert [(x["Node Type"], x.get("Index Name")) for x in scans if "Index" in x["Node Type"]] == \
                    [("Index Scan", "messages_pkey")], scans
                assert scans[-1].get("Scan Direction") == "Backward"
    finally:
        plan.document_frequencies.clear()
        Message.objects.all().delete()


def _scans(node: dict) -> list[dict]:
    return [node, *(scan for child in node.get("Plans", []) for scan in _scans(child))]


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL replies")
def test_the_replies_in_an_owner_s_scope_are_the_owner_s_next_messages_of_each_hit_s_conversation(ids_given_back):
    # The owner's filter is an expression no index serves (`following`): it still filters exactly.
    start = timezone.now() - timezone.timedelta(days=30)
    Message.objects.bulk_create([
        Message(agent_id="main", channel="t", chat_id=str(i % 3), owner_id="dana" if i % 5 else "sam",
                role="user" if i % 2 else "assistant", created_at=start + timezone.timedelta(seconds=i),
                content=f"note {i}")
        for i in range(300)])
    hits = list(Message.objects.filter(owner_id="dana").order_by("id").values_list("id", "chat_id")[:5])
    filters = {"agent_id": "main", "owner_id": "dana"}
    replies = backend.following([pk for pk, _ in hits], filters, 2)
    for pk, chat in hits:
        after = Message.objects.filter(chat_id=chat, id__gt=pk, **filters).order_by("created_at", "id")[:2]
        assert [r for r, _ in replies[pk]] == [m.id for m in after] and len(after) == 2
