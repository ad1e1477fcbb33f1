"""Relevance: natural-language questions about a multi-session conversation find the messages that answer them."""

import random

import pytest

from bench import recall_eval
from memory.conversations import ConversationKey
from memory.models import Message
from memory.tools import ToolContext, run_tool

pytestmark = pytest.mark.django_db


def _load(distractors: int) -> list[set[int]]:
    rows = [Message(agent_id=recall_eval.AGENT, owner_id=recall_eval.OWNER, channel=recall_eval.CHANNEL,
                    chat_id=recall_eval.CHAT, role=role, content=text, created_at=at)
            for _, role, text, at in recall_eval.messages()]
    created = [Message.objects.create(**{f: getattr(r, f) for f in ("agent_id", "owner_id", "channel", "chat_id",
                                                                      "role", "content", "created_at")})
               for r in rows]
    # Other owners talk about the same things: every word of the conversation, shuffled into other chats.
    rng = random.Random(1)
    vocabulary = [w for _, _, text, _ in recall_eval.messages() for w in text.split()]
    last = recall_eval.messages()[-1][3]
    Message.objects.bulk_create([
        Message(agent_id="main", owner_id=f"o{i % 7}", channel="slack", chat_id=str(i % 13), role="user",
                content=" ".join(rng.choices(vocabulary, k=rng.randint(5, 25))), created_at=last)
        for i in range(distractors)])
    tags = {tag: row.id for (tag, *_), row in zip(recall_eval.messages(), created, strict=True) if tag}
    return [{tags[t] for t in want} for _, want in recall_eval.QUESTIONS]


def _recall(scope: str, answers: list[set[int]]) -> float:
    ctx = ToolContext(agent_id="main", owner_id=recall_eval.OWNER, trust="operator",
                      conversation=ConversationKey(recall_eval.CHANNEL, recall_eval.CHAT))
    found = [[d["id"] for d in run_tool("memory_recall", ctx, {"query": q, "scope": scope, "source": "history",
                                                               "limit": 10}).data or []]
             for q, _ in recall_eval.QUESTIONS]
    return recall_eval.recall_at(found, answers)


def test_questions_find_their_answers_in_the_conversation(home):
    answers = _load(distractors=0)
    assert _recall("current", answers) >= 0.85


def test_questions_find_their_answers_among_other_owners_chatter(home):
    answers = _load(distractors=600)
    assert _recall("current", answers) >= 0.85
    assert _recall("owner", answers) >= 0.85
    assert _recall("all", answers) >= 0.5  # 600 shuffles of the same words: a hard crowd


def test_recall_at_k_counts_questions_with_an_answer_in_the_first_k():
    assert recall_eval.recall_at([[1, 2], [3], [9] * 11 + [4]], [{2}, {5}, {4}], k=10) == pytest.approx(1 / 3)
