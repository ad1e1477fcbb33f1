"""`memory_recall` as a bot calls it: time words and bounds, `signals` on every result, `meta` on the answer."""

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.conversations import ConversationKey, message_append
from memory.tools import ToolContext, run_tool

pytestmark = pytest.mark.django_db
CONV = "telegram:7"


def said(text, *, days_ago: float, role="user"):
    return message_append(agent_id="main", conversation=CONV, role=role, content=text, trust="operator",
                          created_at=timezone.now() - timedelta(days=days_ago))


def recall(**arguments):
    ctx = ToolContext(agent_id="main", owner_id="default", trust="operator", conversation=ConversationKey.parse(CONV))
    return run_tool("memory_recall", ctx, {"source": "history", "scope": "current", **arguments})


@pytest.fixture
def history(home):
    return {
        "old_bowling": said("We went bowling with the team after the sprint review", days_ago=40),
        "question": said("How old is Biscuit?", days_ago=3, role="assistant"),
        "answer": said("He's a two year old beagle", days_ago=3),
        "new_bowling": said("Went bowling again, I scored 150!", days_ago=1),
        "dinner": said("Dinner was pasta with Rita", days_ago=1),
    }


def test_a_time_word_puts_what_was_said_then_first_and_says_why(history):
    answer = recall(query="when did I go bowling yesterday?")
    ids = [d["id"] for d in answer.data]
    # Yesterday's match, then the reply after it (also yesterday), then the older match.
    assert ids[:3] == [history["new_bowling"].id, history["dinner"].id, history["old_bowling"].id]
    day = (timezone.now() - timedelta(days=1)).date().isoformat()
    assert answer.data[0]["signals"]["why"] == f"time: {day}, matched: bowling"
    assert answer.data[1]["context"] == "reply"
    assert answer.data[2]["signals"]["why"] == "matched: bowling"
    assert answer.meta["time"][0]["label"] == f"time: {day}"


def test_a_question_of_time_words_only_lists_that_time(history):
    answer = recall(query="what happened yesterday?")
    assert [d["id"] for d in answer.data] == [history["new_bowling"].id, history["dinner"].id]


def test_after_and_before_are_hard_bounds(history):
    since = (timezone.now() - timedelta(days=10)).date().isoformat()
    matches = [d["id"] for d in recall(query="bowling", after=since).data if d["context"] is None]
    assert matches == [history["new_bowling"].id]
    found = [d["id"] for d in recall(query="bowling", before=since).data]
    assert found[0] == history["old_bowling"].id and history["new_bowling"].id not in found
    assert history["dinner"].id not in found  # a reply after the bound is outside it too
    refused = recall(query="bowling", after="last tuesday")
    assert (refused.ok, refused.data) == (False, {"error": "invalid_argument"})


def test_every_result_carries_signals_and_a_reply_says_it_is_context(history):
    answer = recall(query="How old is Biscuit?", mode="lexical")
    by_id = {d["id"]: d for d in answer.data}
    question, reply = by_id[history["question"].id], by_id[history["answer"].id]
    assert question["signals"]["lexical_rank"] == 1 and question["signals"]["why"] == "matched: old, biscuit"
    assert question["context"] is None and question["signals"]["semantic_rank"] is None
    assert reply["context"] == "reply" and reply["signals"]["why"] == f"reply to #{history['question'].id}"
    assert reply["signals"]["lexical_rank"] is None
    assert answer.meta == {"mode": "lexical", "degraded": None, "time": []}


def test_a_mode_is_checked_and_a_weaker_one_says_so(history):
    assert recall(query="bowling", mode="fuzzy").data == {"error": "invalid_argument"}
    assert recall(query="bowling", mode="lexical").meta["mode"] == "lexical"
