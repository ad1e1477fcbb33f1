"""`created_at` on a message: operator keys backfill history in order, never far in the future."""

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import Message
from tests.personas import error_of

pytestmark = pytest.mark.django_db


def test_an_operator_backfills_history_in_order(operator):
    first = operator.say("we adopted Biscuit", created_at="2023-08-05T18:30:00+01:00")
    second = operator.say("he chewed my shoes", created_at="2023-08-06T09:00:00Z")
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["created_at"] == "2023-08-05T17:30:00Z"
    stored = list(Message.objects.order_by("id").values_list("content", "created_at"))
    assert [when.isoformat() for _, when in stored] == ["2023-08-05T17:30:00+00:00", "2023-08-06T09:00:00+00:00"]
    now = operator.say("and today he is fine")
    assert timezone.now() - Message.objects.get(pk=now.json()["id"]).created_at < timedelta(minutes=1)


def test_a_time_before_the_newest_message_is_refused_and_nothing_is_stored(operator):
    operator.say("later", created_at="2023-08-06T09:00:00Z")
    assert error_of(operator.say("earlier", created_at="2023-08-05T09:00:00Z")) == (400, "created_at_out_of_order")
    assert list(Message.objects.values_list("content", flat=True)) == ["later"]


def test_the_future_a_naive_time_and_a_number_are_refused(operator):
    ahead = (timezone.now() + timedelta(minutes=10)).isoformat()
    assert error_of(operator.say("soon", created_at=ahead)) == (400, "created_at_in_future")
    assert operator.say("close", created_at=(timezone.now() + timedelta(minutes=2)).isoformat()).status_code == 201
    assert error_of(operator.say("naive", created_at="2023-08-05T18:30:00"))[0] == 422
    assert error_of(operator.say("epoch", created_at=1691256600))[0] == 422
    assert list(Message.objects.values_list("content", flat=True)) == ["close"]


def test_a_channel_key_may_not_backfill(bot, owner_bot):
    assert error_of(bot.say("old news", created_at="2023-08-05T18:30:00Z")) == (403, "operator_key_required")
    assert error_of(owner_bot.say("old news", created_at="2023-08-05T18:30:00Z")) == (403, "operator_key_required")
    assert not Message.objects.exists()
