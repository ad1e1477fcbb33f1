"""The replies after the best hits (the reply rule's rows): each hit's conversation's next messages that
pass the filters, in time order, equal times told apart by id, the same on both databases."""

from datetime import timedelta

import pytest
from django.utils import timezone

from memory import search
from memory.models import Message
from memory.search.rank import Scored

pytestmark = pytest.mark.django_db


@pytest.fixture
def talk():
    """Three conversations interleaved, two owners; every third message has the time of the one before it."""
    start = timezone.now() - timedelta(days=3)
    rows, at = [], start
    for i in range(120):
        if i % 3:
            at += timedelta(seconds=7)
        rows.append(Message(agent_id="main", channel="telegram", chat_id=str(i % 3), owner_id="ana" if i % 4 else "bo",
                            role="user" if i % 2 else "assistant", content=f"line {i}", created_at=at))
    Message.objects.bulk_create(rows)
    return list(Message.objects.order_by("id"))


def expected(hit, filters, count):
    later = [m for m in Message.objects.filter(agent_id="main", channel=hit.channel, chat_id=hit.chat_id, **filters)
             if (m.created_at, m.id) > (hit.created_at, hit.id)]
    return [(m.id, m.content) for m in sorted(later, key=lambda m: (m.created_at, m.id))[:count]]


@pytest.mark.parametrize("filters", [{"agent_id": "main"}, {"agent_id": "main", "owner_id": "ana"}])
def test_each_hit_gets_its_own_conversation_s_next_messages(talk, filters):
    hits = [talk[5], talk[40], talk[41], talk[77], talk[118]]
    owner = {k: v for k, v in filters.items() if k == "owner_id"}
    replies = search.following([h.id for h in hits], filters, 2)
    for hit in hits:
        assert replies.get(hit.id, []) == expected(hit, owner, 2), hit.content
    assert replies[talk[5].id] and len(replies[talk[5].id]) == 2


def test_equal_times_are_told_apart_by_id_and_a_missing_hit_has_none(talk):
    # talk[1], talk[4], talk[7] … are one conversation: talk[1] and talk[7] take talk[4]'s time.
    Message.objects.filter(pk__in=[talk[1].pk, talk[7].pk]).update(created_at=talk[4].created_at)
    hit = Message.objects.get(pk=talk[4].pk)
    replies = search.following([hit.id, 10**9], {"agent_id": "main"}, 3)
    assert replies.get(10**9, []) == []
    assert [r for r, _ in replies[hit.id]] == [talk[7].id, talk[10].id, talk[13].id]  # not talk[1], said before


def test_the_replies_the_cut_left_out_are_handed_back_with_their_hit_and_share(talk):
    # talk[0], talk[3], talk[6] … are one conversation: talk[3] the next message after talk[0].
    hits = [Scored(talk[i].id, score, "") for i, score in ((0, 10.0), (30, 9.8), (60, 9.6), (90, 9.5))]
    cut = []
    kept = search.with_replies(hits, {"agent_id": "main"}, 5, cut=cut)
    kept_ids = {h.id for h in kept}
    assert len(kept) == 5 and {h.id for h in hits} <= kept_ids
    added = {(r.id, r.reply_to, r.share) for r in kept + cut if r.reply_to is not None}
    shares = dict(zip((0, 1), search.FOLLOW_SHARES, strict=True))
    assert added == {(talk[i + 3 * (n + 1)].id, talk[i].id, shares[n]) for i in (0, 30, 60, 90) for n in (0, 1)}
    assert {r.id for r in cut}.isdisjoint(kept_ids) and len(cut) == 8 - 1
    assert search.with_replies(hits, {"agent_id": "main"}, 5) == kept  # without `cut`, the same list
