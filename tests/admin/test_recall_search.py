"""The console's search boxes run recall: best first, each result's signals, replies marked as context,
matched words highlighted, and every piece of text escaped."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from memory.conversations import message_append
from memory.search import semantic
from memory.vectors import embed_pending
from tests.fakeprovider import embeddings_config_toml, use_config
from tests.memory_factories import fact
from tests.personas import CONV, say

pytestmark = [pytest.mark.django_db]

MESSAGES = reverse("admin:memory_message_changelist")
MEMORIES = reverse("admin:memory_memory_changelist")


def listed(response, model="message") -> list[int]:
    ids = re.findall(rf'href="/admin/memory/{model}/(\d+)/change/', response.content.decode())
    return list(dict.fromkeys(int(i) for i in ids))


def rows(html: str) -> list[str]:
    return re.findall(r"<tr>.*?</tr>", html, flags=re.S)


def test_message_search_lists_hits_best_first_with_why_and_the_words_marked(console, home):
    older = say("bowling with the team, then more bowling, bowling all night")
    question = say("How old is Biscuit the beagle?", role="assistant")
    answer = say("He turned two in May")
    say("nothing to do with it", conversation="telegram:9")
    response = console.get(MESSAGES, {"q": "bowling beagle"})
    html = response.content.decode()
    found = listed(response)
    assert set(found) >= {older.id, question.id, answer.id}
    reply_row = next(r for r in rows(html) if f"/admin/memory/message/{answer.id}/" in r)
    assert "context: reply" in reply_row and f"reply to #{question.id}" in reply_row
    hit_row = next(r for r in rows(html) if f"/admin/memory/message/{older.id}/" in r)
    assert "matched: bowling" in hit_row and "<mark>bowling</mark>" in hit_row and "words 1" in hit_row
    assert found.index(question.id) < found.index(answer.id)  # a reply comes after what it answers


def test_without_a_query_there_is_no_match_column(console, home):
    say("bowling again")
    assert "<mark>" not in console.get(MESSAGES).content.decode()
    assert ">match<" not in console.get(MESSAGES).content.decode()


def test_what_a_user_wrote_is_escaped_in_the_match_column(console, home):
    say("<script>alert('x')</script> bowling «tricky» marks")
    html = console.get(MESSAGES, {"q": "bowling"}).content.decode()
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert "<mark>bowling</mark>" in html


def test_with_an_agent_chosen_and_embeddings_on_the_search_is_hybrid(console, home, fake_provider):
    semantic.clear()
    with use_config(embeddings_config_toml(fake_provider, dimensions=32)):
        meant = say("I adopted a beagle from the rescue")
        say("we had pasta for dinner")
        embed_pending()
        html = console.get(MESSAGES, {"q": "beagle rescue", "agent_id": "main"}).content.decode()
    semantic.clear()
    row = next(r for r in rows(html) if f"/admin/memory/message/{meant.id}/" in r)
    assert "words 1" in row and "meaning 1" in row


def test_memory_search_shows_the_rows_signals(console, home):
    row = fact("pet", "has a beagle called Biscuit", "identity")
    fact("city", "lives in Leeds", "identity")
    response = console.get(MEMORIES, {"q": "beagle"})
    assert listed(response, "memory") == [row.id]
    assert "<mark>beagle</mark>" in response.content.decode()


def test_the_rows_recall_found_within_the_filters_are_looked_up_by_key_alone(console, home):
    # Recall applied the agent's filter; beside it SQLite would walk the agent's index instead of the keys.
    mine = say("bowling with the team")
    message_append(agent_id="other", conversation=CONV, role="user", content="bowling elsewhere", trust="operator")
    with CaptureQueriesContext(connection) as queries:
        response = console.get(MESSAGES, {"q": "bowling", "agent_id": "main"})
    assert listed(response) == [mine.id]
    page = [q["sql"] for q in queries.captured_queries if '"recall_rank"' in q["sql"]]  # the count and the rows
    assert len(page) == 2 and all('"agent_id"' not in sql.rpartition(" WHERE ")[2] for sql in page), page


def test_a_filter_recall_did_not_apply_still_narrows_the_results(console, home):
    # `category=` (empty) is "no category": the changelist's filter, which recall does not take.
    note = fact("note.bowling", "bowling on Friday with the team", "")
    hobby = fact("hobby", "loves bowling", "interest")
    assert set(listed(console.get(MEMORIES, {"q": "bowling"}), "memory")) == {note.id, hobby.id}
    assert listed(console.get(MEMORIES, {"q": "bowling", "category": ""}), "memory") == [note.id]
