"""`message_days` (`memory.days`): the ids of each day's messages, kept by the database, and recall's time
spans read through it. Runs on SQLite and on PostgreSQL."""

import random
import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import checks, days, fts, search
from memory.conversations import ConversationKey
from memory.models import Message, MessageDay
from memory.search import plan
from memory.tools import ToolContext, run_tool

pytestmark = pytest.mark.django_db

MARCH = datetime(2025, 3, 1, tzinfo=UTC)
APRIL = datetime(2025, 4, 1, tzinfo=UTC)


def _add(text, when, chat=1, agent="main", **fields):
    return Message.objects.create(agent_id=agent, role="user", content=text, created_at=when, channel="telegram",
                                  chat_id=str(chat), thread_scope="root", **fields)


def _span(agent, start, end):
    with connection.cursor() as cursor:
        return days.id_range(cursor, agent, start, end)


def _truth(agent, start, end):
    rows = Message.objects.filter(agent_id=agent, created_at__gte=start, created_at__lt=end)
    return list(rows.values_list("id", flat=True))


def test_every_message_lies_within_its_day_however_it_was_written():
    rng = random.Random(5)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    # Conversations written in turn, some backfilled long after: ids do not follow time across them.
    for chat in range(6):
        first = start + timedelta(days=rng.randrange(60))
        Message.objects.bulk_create([
            Message(agent_id=rng.choice(["main", "other"]), role="user", content=f"note {chat} {i}",
                    created_at=first + timedelta(hours=7 * i), channel="web", chat_id=str(chat), thread_scope="root")
            for i in range(40)])
    moved = Message.objects.order_by("id").first()
    Message.objects.filter(pk=moved.pk).update(created_at=datetime(2026, 6, 1, 12, tzinfo=UTC))
    for _ in range(40):
        a = start + timedelta(days=rng.randrange(90), hours=rng.randrange(24))
        b = a + timedelta(hours=rng.randrange(1, 24 * 20))
        for agent in ("main", "other"):
            low, high = _span(agent, a, b)
            assert all(low <= pk <= high for pk in _truth(agent, a, b)), (agent, a, b)
    low, high = _span(moved.agent_id, datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 6, 2, tzinfo=UTC))
    assert low <= moved.pk <= high


def test_a_day_holds_whole_blocks_of_ids_and_a_day_without_messages_none():
    row = _add("the ferry", MARCH + timedelta(days=3, hours=23, minutes=59))
    day = MessageDay.objects.get(agent_id="main")
    assert str(day.day) == "2025-03-04"
    assert day.first_id == row.pk - row.pk % days.BLOCK and day.last_id == day.first_id + days.BLOCK - 1
    assert _span("main", MARCH + timedelta(days=4), APRIL) == (1, 0)
    end = MARCH + timedelta(days=3, hours=23, minutes=59, seconds=1)
    assert _span("main", MARCH, end) == (day.first_id, day.last_id)
    assert _span("nobody", MARCH, APRIL) == (1, 0)


def test_a_dated_search_finds_a_backfilled_conversation_and_reads_only_the_span():
    # A conversation of March 2025 backfilled after a year of newer ones: its ids are the newest.
    Message.objects.bulk_create([
        Message(agent_id="main", role="user", content=f"garden plan {i}", created_at=APRIL + timedelta(days=i),
                channel="web", chat_id="1", thread_scope="root") for i in range(300)])
    old = [_add(f"the garden plan for the shed, part {i}", MARCH + timedelta(days=i), chat=2) for i in range(3)]
    newer = _add("the garden plan again", APRIL + timedelta(days=400), chat=2)
    filters = {"agent_id": "main", "created_at__gte": MARCH, "created_at__lt": APRIL}
    with CaptureQueriesContext(connection) as queries:
        found = [row.id for row in search.search_messages(query="garden plan", filters=filters, limit=20)]
    assert sorted(found) == sorted(row.id for row in old)
    assert newer.id not in found
    bounds = days.span_ids(connection.cursor(), "messages", filters)
    assert bounds[0] <= min(found) and max(found) <= bounds[1]
    # Every index pass was bounded by the span's ids (the 300 newer matches of April were never read);
    # only the words' frequencies were probed over the whole table.
    passes = re.compile(r"ORDER BY (rowid|\w\.id|t\.id \+ 0) DESC LIMIT")
    matching = [q["sql"] for q in queries.captured_queries
                if passes.search(q["sql"]) and f"LIMIT {plan.DF_PROBE}" not in q["sql"]]
    assert matching and all(f"< {bounds[1] + 1}" in sql or f"<= {bounds[1]}" in sql for sql in matching)


def test_a_span_without_messages_finds_nothing_at_once():
    _add("the garden plan", MARCH)
    with CaptureQueriesContext(connection) as queries:
        found = search.search_messages(query="garden", limit=20, filters={
            "agent_id": "main", "created_at__gte": APRIL, "created_at__lt": APRIL + timedelta(days=30)})
    assert found == []
    assert not [q for q in queries.captured_queries if "MATCH" in q["sql"] or "@@" in q["sql"]]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite only: its table rebuilds drop triggers")
def test_the_guard_restores_the_triggers_and_refills_the_days():
    _add("before", MARCH)
    with connection.cursor() as cursor:
        for name in days.SQLITE_TRIGGERS:
            cursor.execute(f"DROP TRIGGER {name}")
    assert set(days.SQLITE_TRIGGERS) <= set(fts.missing_triggers(connection))
    unseen = _add("written while the trigger was gone", APRIL + timedelta(days=2))
    assert _span("main", APRIL, APRIL + timedelta(days=5)) == (1, 0)
    assert set(days.SQLITE_TRIGGERS) <= set(fts.repair(connection))
    assert fts.missing_triggers(connection) == []
    low, high = _span("main", APRIL, APRIL + timedelta(days=5))
    assert low <= unseen.pk <= high
    later = _add("after", APRIL + timedelta(days=9))
    low, high = _span("main", APRIL + timedelta(days=9), APRIL + timedelta(days=10))
    assert low <= later.pk <= high


def test_a_question_of_time_only_over_every_conversation_lists_the_span_oldest_first():
    later = [_add(f"news of the week {i}", APRIL + timedelta(days=7 * i), chat=1) for i in range(3)]
    # Backfilled after April's messages: March's conversation holds the newest ids.
    march = [_add(f"a note from March {i}", MARCH + timedelta(days=2 * i), chat=2, owner_id="dana") for i in range(3)]
    ctx = ToolContext(agent_id="main", owner_id="dana", trust="operator",
                      conversation=ConversationKey("telegram", "2", "root"))
    for scope in ("all", "owner", "current"):
        answer = run_tool("memory_recall", ctx, {"query": "what happened in March 2025?", "scope": scope,
                                                 "source": "history", "mode": "lexical"})
        assert [d["id"] for d in answer.data] == [row.id for row in march], scope
    with CaptureQueriesContext(connection) as queries:
        answer = run_tool("memory_recall", ctx, {"query": "what happened in April 2025?", "scope": "all",
                                                 "source": "history", "mode": "lexical"})
    assert [d["id"] for d in answer.data] == [row.id for row in later]
    # Listed between the span's ids, not through every one of the agent's rows.
    low, high = _span("main", APRIL, datetime(2025, 5, 1, tzinfo=UTC))
    listing = [q["sql"] for q in queries.captured_queries if "ORDER BY t.created_at, t.id" in q["sql"]]
    assert listing and all(f"t.id >= {low} AND t.id <= {high}" in sql for sql in listing)


def test_the_rest_of_the_scope_is_searched_only_when_the_span_leaves_room():
    march = [_add(f"the garden plan, part {i}", MARCH + timedelta(days=i), chat=2) for i in range(6)]
    april = [_add(f"the garden plan again, part {i}", APRIL + timedelta(days=i), chat=2) for i in range(6)]
    ctx = ToolContext(agent_id="main", owner_id="default", trust="operator",
                      conversation=ConversationKey("telegram", "2", "root"))
    low, high = _span("main", MARCH, APRIL)
    passes = re.compile(r"ORDER BY (rowid|\w\.id|t\.id \+ 0) DESC LIMIT")

    def ask(limit):
        with CaptureQueriesContext(connection) as queries:
            answer = run_tool("memory_recall", ctx, {"query": "the garden plan in March 2025", "scope": "current",
                                                     "source": "history", "mode": "lexical", "limit": limit})
        unbounded = [q["sql"] for q in queries.captured_queries if passes.search(q["sql"])
                     and f"LIMIT {plan.DF_PROBE}" not in q["sql"]
                     and f"< {high + 1}" not in q["sql"] and f"<= {high}" not in q["sql"]]
        return [d["id"] for d in answer.data], unbounded

    # Five of March's six fill the answer: no pass reads beyond the span.
    found, unbounded = ask(5)
    assert set(found) < {row.id for row in march} and len(found) == 5
    assert unbounded == []
    # Room left after March's six: the rest of the conversation follows them.
    found, unbounded = ask(20)
    assert set(found[:6]) == {row.id for row in march} and set(found[6:]) == {row.id for row in april}
    assert unbounded


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's trigger and memory.E002")
def test_postgres_warns_without_the_trigger_and_the_rebuild_command_restores_it():
    _add("before", MARCH)
    assert checks.check_search_indexes() == []
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {days.TABLE}_note ON messages")
    [error] = checks.check_search_indexes()
    assert error.id == "memory.E002" and "rebuild_search_index" in error.hint
    unseen = _add("written while the trigger was gone", APRIL + timedelta(days=2))
    assert _span("main", APRIL, APRIL + timedelta(days=5)) == (1, 0)
    out = StringIO()
    call_command("rebuild_search_index", stdout=out)
    assert "refilled" in out.getvalue() and checks.check_search_indexes() == []
    low, high = _span("main", APRIL, APRIL + timedelta(days=5))
    assert low <= unseen.pk <= high
