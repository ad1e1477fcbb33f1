"""The search contract, for messages and for memories, on whichever database the suite runs against.

`SearchContract` holds the behaviours; `TestMessageSearch` and `TestMemorySearch` bind them to a table.
`make test` runs it on SQLite (FTS5 mirrors), then again on PostgreSQL (tsvector + GIN).
"""

import random
import tracemalloc
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory import search
from memory.models import Memory, Message
from memory.search.rank import SCORED_CHARS

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
HOSTILE = ['"', '""', "C++", "node.js", "AND", "OR", "NOT", "NEAR", "(", ")", "NOT OR AND", "a:b", "col:umn*",
           "^x", "*", "-", "🙂", "🙂 emoji", "naïve café", "'; DROP TABLE messages; --", "NEAR(a b)", "\\", "{a b}",
           "content:x", '"unterminated', "x & y | !z", "<-> :*", "ǅ ǈ ǋ", "٣٤٥", "\u200b", "\x01\x02", "   ", "",
           "?", "the", "the of and", '"the end"', "e-mail@host.example", "$100 + 20%"]


class SearchContract:
    """Behaviours every backend and table must show. Subclasses provide `add` and `search`."""

    def add(self, text, *, days_ago=0, **scope):
        raise NotImplementedError

    def search(self, query, limit=20, **filters):
        raise NotImplementedError

    def ids(self, query, **filters):
        return [row.id for row in self.search(query, **filters)]

    def test_a_question_finds_the_row_that_answers_it(self):
        self.add("We watched a film about sharks last night")
        answer = self.add("I started the pottery class at the Clayworks studio in March")
        self.add("The class on Tuesday was cancelled because the teacher was ill")
        self.add("Did you start the new book yet?")
        assert self.ids("when did she start the pottery class?")[0] == answer.id

    def test_stop_words_never_decide_a_match(self):
        self.add("the of and to in it is was")
        assert self.ids("what is the pottery thing that was in it?") == []

    def test_a_query_of_only_stop_words_needs_all_of_them(self):
        self.add("who is there?")
        row = self.add("The Who played at the festival")
        assert self.ids("the who") == [row.id]
        assert self.ids('"the who" played') == [row.id]
        assert self.ids("the who, and then") == []

    def test_stop_words_that_never_meet_still_find_their_rows(self):
        asked, ended = self.add("who is there?"), self.add("and that was the end")
        assert set(self.ids("the who")) == {asked.id, ended.id}

    def test_a_query_whose_words_are_in_scope_never_answers_nothing(self):
        for n in range(100):  # "walk" is in most rows of the table, so the plan passes over it...
            self.add(f"a long walk, number {n}", owner="bo")
        self.add("a zebra at the zoo", owner="bo")  # ...for the rarer "zebra", which is only elsewhere
        mine = self.add("walk the dog before work", owner="dana")
        assert self.ids("zebra walk", owner_id="dana") == [mine.id]

    def test_stemming_matches_other_forms_of_a_word(self):
        row = self.add("Dana is running two marathons this year")
        assert self.ids("marathon run") == [row.id]

    def test_a_rare_word_outranks_a_common_one(self):
        for i in range(12):
            self.add(f"the weather was nice on day {i}")
        rare = self.add("the glacier trip was cold")
        assert self.ids("glacier weather")[0] == rare.id

    def test_more_of_the_question_matched_ranks_higher(self):
        one = self.add("Lisbon is lovely in spring")
        both = self.add("Flights to Lisbon for the Portuguese course are booked")
        assert self.ids("Portuguese course in Lisbon") [:2] == [both.id, one.id]

    def test_a_quoted_phrase_ranks_the_exact_phrase_first(self):
        apart = self.add("green walls and a cup of black tea", days_ago=0)
        exact = self.add("she drinks green tea every morning", days_ago=5)
        assert self.ids('"green tea"')[0] == exact.id
        assert set(self.ids('"green tea"')) == {exact.id, apart.id}

    def test_a_query_costs_no_more_than_its_first_phrases_however_many_it_quotes(self):
        rows = [self.add(f"the {w} boat sailed past the harbour wall at dawn") for w in ("red", "old", "big")]
        first = ' '.join(f'"the {w} boat sailed past the harbour wall at dawn"' for w in ("red", "old", "big", "new"))
        many = first + " " + " ".join(f'"word{i} other{i}"' for i in range(300))
        with CaptureQueriesContext(connection) as bounded:
            expected = self.ids(first)
        with CaptureQueriesContext(connection) as asked:
            found = self.ids(many)
        assert found == expected and set(found) == {r.id for r in rows}
        assert len(asked.captured_queries) <= len(bounded.captured_queries)

    def test_names_and_numbers_weigh_more_than_plain_words(self):
        plain = self.add("the dinner was late", days_ago=0)
        name = self.add("Maya phoned about nothing much", days_ago=3)
        assert self.ids("was dinner with Maya nice?")[0] == name.id
        assert plain.id in self.ids("was dinner with Maya nice?")

    def test_recency_orders_equally_relevant_rows(self):
        old = self.add("parked the car on level three", days_ago=60)
        new = self.add("parked the car on level seven", days_ago=1)
        assert self.ids("where did I park the car?") == [new.id, old.id]

    def test_rows_carry_a_snippet_with_the_matched_words_marked(self):
        self.add("After work I went to the pottery class and made a bowl")
        row = self.search("pottery bowl")[0]
        assert "«pottery»" in row.snippet and "«bowl»" in row.snippet
        assert row.search_score > 0

    def test_a_very_long_rows_snippet_comes_from_its_beginning_as_it_is_scored(self):
        filler = "and then some more words about nothing in particular " * (SCORED_CHARS // 50)
        row = self.add("the pottery class starts soon, " + filler + "far away pottery wheel")
        found = self.search("pottery wheel")
        assert [r.id for r in found] == [row.id]
        assert "«pottery»" in found[0].snippet and "wheel" not in found[0].snippet

    def test_the_limit_is_respected_and_clamped(self):
        for i in range(5):
            self.add(f"kayak outing number {i}")
        assert len(self.search("kayak", limit=3)) == 3
        assert len(self.search("kayak", limit=0)) == 1
        assert len(self.search("kayak", limit=10_000)) == 5

    def test_text_without_words_finds_nothing(self):
        self.add("anything at all")
        for query in ("", "   ", "?!", "🙂", '""'):
            assert self.search(query) == []

    @pytest.mark.parametrize("query", HOSTILE)
    def test_any_text_is_a_valid_query(self, query):
        self.add('C++ and node.js notes about a naïve café 🙂 "the end" AND (x) NEAR NOT')
        assert isinstance(self.search(query), list)

    def test_random_hostile_text_never_raises(self):
        self.add("C++ node.js café and the end")
        alphabet = list('"()*:^-+{}[]<>&|!~\\\'.,;?') + ["AND", "OR", "NOT", "NEAR", "c++", "é", "🙂", " ", "x", "7"]
        rng = random.Random(11)
        for _ in range(150):
            assert isinstance(self.search("".join(rng.choices(alphabet, k=rng.randint(1, 12)))), list)

    def test_the_index_follows_updates_and_deletes(self):
        row = self.add("a note about the violin")
        self.change(row, "a note about the cello")
        assert self.ids("violin") == [] and self.ids("cello") == [row.id]
        type(row).objects.filter(pk=row.pk).delete()
        assert self.ids("cello") == []


def _conversation(n):
    return {"channel": "telegram", "chat_id": str(n), "thread_scope": "root"}


class TestMessageSearch(SearchContract):
    def add(self, text, *, days_ago=0, agent="main", owner="default", chat=1, role="user"):
        return Message.objects.create(agent_id=agent, owner_id=owner, role=role, content=text,
                                      created_at=NOW - timedelta(days=days_ago), **_conversation(chat))

    def change(self, row, text):
        row.content = text
        row.save()

    def search(self, query, limit=20, **filters):
        return search.search_messages(query=query, filters={"agent_id": "main", **filters}, limit=limit)

    def test_long_candidates_are_read_only_as_far_as_they_are_scored(self):
        """Candidates and replies are read up to `SCORED_CHARS`: a conversation of long messages had each
        query hold every candidate's whole text (80 of 500 KiB: 38 MiB)."""
        long = "bread " + "lorem ipsum dolor sit amet " * (400 * 1024 // 27)
        for n in range(40):
            self.add(f"{n} {long}")
        self.search("bread", limit=1)  # caches and statements warmed
        tracemalloc.start()
        try:
            found = self.search("bread", limit=2)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(found) == 2
        assert peak < 4 * 2**20  # the two rows shown, whole (0.8 MiB), and the rest as scored

    def test_filters_restrict_to_a_conversation_an_owner_or_an_agent(self):
        here = self.add("the ferry timetable", chat=1, owner="dana")
        there = self.add("the ferry timetable", chat=2, owner="dana")
        other = self.add("the ferry timetable", chat=3, owner="bo")
        elsewhere = self.add("the ferry timetable", chat=1, agent="other")
        assert self.ids("ferry", **_conversation(1)) == [here.id]
        assert set(self.ids("ferry", owner_id="dana")) == {here.id, there.id}
        assert set(self.ids("ferry")) == {here.id, there.id, other.id}
        assert set(self.ids("ferry", owner_id=["dana", "bo"])) == {here.id, there.id, other.id}
        assert elsewhere.id not in self.ids("ferry")

    def test_a_conversation_finds_its_old_message_under_many_newer_matches_elsewhere(self):
        old = self.add("the project kickoff is on Monday", chat=1, days_ago=90)
        Message.objects.bulk_create([
            Message(agent_id="main", owner_id="default", role="user", content=f"project update {i}",
                    created_at=NOW, **_conversation(2)) for i in range(1200)])
        assert self.ids("project kickoff", **_conversation(1)) == [old.id]
        assert old.id in self.ids("when is the project kickoff?")

    def test_a_filter_the_index_does_not_hold_still_finds_older_matches(self):
        answer = self.add("the project budget, from the assistant", role="assistant", days_ago=30)
        Message.objects.bulk_create([
            Message(agent_id="main", owner_id="default", role="user", content=f"project note {i}",
                    created_at=NOW, **_conversation(1)) for i in range(900)])
        assert self.ids("project", role="assistant") == [answer.id]

    def test_the_reply_to_a_matching_message_comes_with_it(self):
        self.add("How old is Biscuit, your dog?", role="assistant", days_ago=2)
        reply = self.add("He is a two year old beagle from the rescue", days_ago=2)
        self.add("Unrelated chatter about the weather", days_ago=1)
        found = self.search("what breed is Biscuit?")
        assert [m.id for m in found][1] == reply.id
        assert found[1].search_score < found[0].search_score and found[1].snippet.startswith("He is a two")

    def test_the_replies_that_come_with_a_match_pass_the_same_filters(self):
        self.add("How old is Biscuit, your dog?", owner="dana", days_ago=3)
        self.add("Biscuit is Bo's beagle, not mine", owner="bo", days_ago=2)  # same conversation, another owner
        reply = self.add("He turns two in May", owner="dana", days_ago=1)
        found = self.search("how old is Biscuit?", owner_id="dana")
        assert [m.owner_id for m in found] == ["dana", "dana"] and found[1].id == reply.id

    def test_scope_values_with_punctuation_match_only_their_conversation(self):
        mine = Message.objects.create(agent_id="main", role="user", content="harbour walk", created_at=NOW,
                                      channel="web", chat_id="a.b-c@d", thread_scope="t.1")
        Message.objects.create(agent_id="main", role="user", content="harbour walk", created_at=NOW,
                               channel="web", chat_id="a.b-c", thread_scope="t.1")
        assert self.ids("harbour", channel="web", chat_id="a.b-c@d", thread_scope="t.1") == [mine.id]


class TestMemorySearch(SearchContract):
    def add(self, text, *, days_ago=0, owner="default", scope_type="owner", scope_id=None, key=None,
            archived=False):
        when = NOW - timedelta(days=days_ago)
        return Memory.objects.create(
            agent_id="main", owner_id=owner, scope_type=scope_type, scope_id=scope_id or owner,
            key=key or f"k{Memory.objects.count()}", value=text, category="context", created_at=when,
            updated_at=when, archived_at=NOW if archived else None)

    def change(self, row, text):
        row.value = text
        row.save()

    def search(self, query, limit=20, **filters):
        return search.search_memories(query=query, filters={"agent_id": "main", **filters}, limit=limit)

    def test_keys_are_searched_too_and_weigh_with_the_value(self):
        row = self.add("Leeds, since June", key="home_city")
        self.add("the city council meeting")
        assert self.ids("which city is home?")[0] == row.id

    def test_scope_and_archive_filters(self):
        mine = self.add("allergic to penicillin", owner="dana")
        note = self.add("penicillin note", owner="dana", scope_type="conversation", scope_id="telegram:2:root")
        self.add("penicillin too", owner="bo")
        gone = self.add("penicillin, archived", owner="dana", archived=True)
        live = {"archived_at__isnull": True}
        assert set(self.ids("penicillin", owner_id="dana", **live)) == {mine.id, note.id}
        assert self.ids("penicillin", owner_id="dana", scope_id=["dana", "main"], **live) == [mine.id]
        assert self.ids("penicillin", archived_at__isnull=False) == [gone.id]


def test_a_filter_on_an_unknown_column_is_refused():
    with pytest.raises(ValueError):
        search.search_messages(query="x", filters={"no_such_column; DROP": 1})


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL schema")
def test_postgres_keeps_generated_vectors_with_gin_indexes():
    with connection.cursor() as cursor:
        cursor.execute("SELECT table_name, is_generated FROM information_schema.columns "
                       "WHERE column_name = 'search_vector' ORDER BY table_name")
        assert cursor.fetchall() == [("memories", "ALWAYS"), ("messages", "ALWAYS")]
        cursor.execute("SELECT indexname FROM pg_indexes WHERE indexdef LIKE '%%USING gin (search_vector)%%' "
                       "ORDER BY indexname")
        assert [r[0] for r in cursor.fetchall()] == ["memories_search_idx", "messages_search_idx"]
