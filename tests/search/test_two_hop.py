"""A two-hop question (its subject named by a relative clause) finds the rows linked by its best hits' names."""

import pytest

from memory.conversations import ConversationKey, message_append
from memory.search import bridge, rank
from memory.tools import ToolContext, run_tool

pytestmark = pytest.mark.django_db
QUESTION = "what profession does the sibling who takes her mum to appointments have?"


def said(text, *, conversation="telegram:aisha", owner="aisha"):
    return message_append(agent_id="main", conversation=conversation, role="user", content=text, trust="operator",
                          owner_id=owner)


def recall(query, scope="current", **arguments):
    ctx = ToolContext(agent_id="main", owner_id="aisha", trust="operator",
                      conversation=ConversationKey.parse("telegram:aisha"))
    return run_tool("memory_recall", ctx, {"query": query, "source": "history", "scope": scope, "mode": "lexical",
                                           **arguments})


@pytest.fixture
def history(home):
    rows = {
        "brother": said("My brother Imran is taking her to the appointments, he works from home."),
        "filler": [said(f"Mum has appointments again in week {n}, the clinic is slow.") for n in range(12)],
        "accountant": said("Imran offered to invest and do the books. He's an accountant."),
        "other": said("Imran from the market sold me flour.", conversation="telegram:someone", owner="someone"),
    }
    return rows


def test_a_relative_clause_marks_a_two_hop_question():
    assert bridge.wanted(QUESTION)
    assert bridge.wanted("where will Rui spend Christmas with the family that visited at Easter?")
    assert not bridge.wanted("who won the school chess tournament?")  # the question word, not a clause
    assert not bridge.wanted("what does Imran do for a living?")


def test_names_are_the_capitalised_words_the_question_lacks():
    texts = ["Leah is brilliant, she already shapes baguettes better than me.", "I met Priya in Leeds. Leah too."]
    assert bridge.names(texts, "when did the person who shapes baguettes in Leeds start?") == ["Leah", "Priya"]


def test_names_are_read_from_the_beginning_of_a_very_long_hit_as_it_is_ranked():
    long = "she bakes bread every day. " * (rank.SCORED_CHARS // 27 + 1) + "Leah started in spring."
    assert bridge.names([long], "when did the person who bakes start?") == []
    assert bridge.names([long[-30:]], "when did the person who bakes start?") == ["Leah"]


def test_the_row_a_name_links_comes_after_the_best_hits_and_says_why(history):
    answer = recall(QUESTION)
    ids = [d["id"] for d in answer.data]
    assert ids[0] == history["brother"].id
    linked = next(d for d in answer.data if d["id"] == history["accountant"].id)  # it shares no word
    assert ids.index(linked["id"]) == bridge.KEEP
    assert linked["signals"]["why"] == f"linked by Imran to #{history['brother'].id}"
    assert linked["signals"]["lexical_rank"] is None and linked["context"] is None
    # Without the clause the same words find no such row.
    plain = recall("what profession takes her mum to appointments?")
    assert history["accountant"].id not in [d["id"] for d in plain.data]


def test_a_name_links_only_within_the_first_hits_owner(history):
    found = [d["id"] for d in recall(QUESTION, scope="all").data]
    assert history["accountant"].id in found and history["other"].id not in found
