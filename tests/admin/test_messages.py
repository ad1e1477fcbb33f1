"""Messages changelist: full-text search through the FTS mirror, filters, and no COUNT(*) of the table."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from memory.models import Message
from tests.personas import say

pytestmark = [pytest.mark.django_db]

URL = reverse("admin:memory_message_changelist")


def listed(response) -> set[int]:
    return {int(i) for i in re.findall(r'href="/admin/memory/message/(\d+)/change/', response.content.decode())}


def test_it_lists_messages_newest_first_with_their_conversation(console, home):
    first = say("hello there")
    second = say("hi again", conversation="discord:7:thread-1", role="assistant")
    html = console.get(URL).content.decode()
    assert html.index(f"/admin/memory/message/{second.id}/") < html.index(f"/admin/memory/message/{first.id}/")
    assert "discord:7:thread-1" in html and "telegram:42:root" in html


def test_search_finds_messages_by_their_words(console, home):
    wanted = say("She runs along the river every morning")
    other = say("The weather is grey today", conversation="telegram:77")
    found = listed(console.get(URL, {"q": "river"}))
    assert wanted.id in found and other.id not in found


@pytest.mark.skipif(connection.vendor != "sqlite", reason="word forms come from SQLite's FTS5 porter stemmer")
def test_search_matches_word_forms_through_the_full_text_index(console, home):
    runs = say("She runs along the river every morning")
    other = say("The weather is grey today", conversation="telegram:77")
    found = listed(console.get(URL, {"q": "running"}))  # the porter stemmer finds "runs"; LIKE would not
    assert runs.id in found and other.id not in found


def test_search_treats_query_syntax_as_plain_text(console, home):
    note = say("I write C++ and node.js")
    assert listed(console.get(URL, {"q": 'write ( "* NEAR'})) == {note.id}
    assert console.get(URL, {"q": '" AND ( NEAR'}).status_code == 200


def test_search_ranks_within_the_chosen_filters(console, home):
    for i in range(3):
        say(f"coffee talk number {i}", conversation="telegram:1")
    wanted = say("coffee in the other chat", conversation="discord:2")
    response = console.get(URL, {"q": "coffee", "channel": "discord"})
    assert listed(response) == {wanted.id}


def test_filters_by_agent_channel_kind_and_guest(console, home):
    guest = say("a guest speaks", conversation="telegram:9", trust="guest")
    operator = say("the owner speaks", conversation="telegram:9")
    voice = say("spoken words", conversation="realtime:dev1", kind="voice_turn")
    other_agent = Message.objects.create(agent_id="second", channel="telegram", chat_id="9", role="user",
                                         content="another agent", trust="operator", created_at=timezone.now())
    assert listed(console.get(URL, {"trust": "guest"})) == {guest.id}
    assert listed(console.get(URL, {"kind": "voice_turn"})) == {voice.id}
    assert listed(console.get(URL, {"channel": "realtime"})) == {voice.id}
    assert other_agent.id not in listed(console.get(URL, {"agent_id": "main"}))
    assert operator.id in listed(console.get(URL, {"agent_id": "main", "trust": "operator"}))


def test_the_changelist_never_counts_the_whole_table(console, home):
    now = timezone.now()
    Message.objects.bulk_create(
        Message(agent_id="main", channel="telegram", chat_id="1", role="user", content=f"message {i}",
                created_at=now) for i in range(10_050))
    with CaptureQueriesContext(connection) as queries:
        response = console.get(URL)
    assert response.status_code == 200
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper() and '"messages"' in q["sql"]]
    assert counts == []  # an estimate from the highest id, not COUNT(*)
    assert re.search(r"about\s+\d+\s+messages", response.content.decode())
    with CaptureQueriesContext(connection) as queries:
        response = console.get(URL, {"channel": "telegram"})
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper() and '"messages"' in q["sql"]]
    assert len(counts) == 1 and "LIMIT 10001" in counts[0]  # a filtered count stops at the cap
    assert re.search(r"more than\s+10000\s+messages", response.content.decode())


def test_a_message_page_shows_its_content_and_the_rows_it_led_to(console, world):
    response = console.get(reverse("admin:memory_message_change", args=[world.message.id]))
    html = response.content.decode()
    assert "I moved to Lisbon last year" in html
    assert "home_city" in html  # the reviewer's row names this message as its source


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query plan (PostgreSQL plans by statistics)")
def test_a_message_page_finds_the_rows_it_led_to_through_their_index(console, world):
    url = reverse("admin:memory_message_change", args=[world.message.id])
    with CaptureQueriesContext(connection) as queries:
        console.get(url)
    sources = [q["sql"] for q in queries.captured_queries if '"source_message_id" =' in q["sql"]]
    assert len(sources) == 1
    with connection.cursor() as cursor:  # not the agent's every memory row: the rows naming this message
        cursor.execute("EXPLAIN QUERY PLAN " + sources[0])
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "memories_source_message_idx (agent_id=? AND source_message_id=?)" in plan, plan
