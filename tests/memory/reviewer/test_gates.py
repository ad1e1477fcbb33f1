"""When a review runs at all: the interval, `--now`, the switches that turn it off, a live claim."""

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import ReviewRun, ReviewState
from tests.fakeprovider import Reply
from tests.memory.reviewer.conftest import review, say

pytestmark = pytest.mark.django_db


def test_gates_interval_disabled_and_memory_off(model):
    say("I like tea")
    model.responder = lambda request: Reply(text="Nothing to save.")
    assert review(force=False)["status"] == "nothing_to_save"  # never reviewed: runs
    say("I like coffee too")
    assert review(force=False)["reason"] == "under_interval"
    assert review(force=True)["status"] == "nothing_to_save"  # --now bypasses the interval
    ReviewState.objects.update(last_reviewed_at=timezone.now() - timedelta(hours=25))
    say("and cocoa")
    assert review(force=False)["status"] == "nothing_to_save"
    say("and mate")
    with model.configure("[fermix_core.memory]\nreview_interval_hours = 0\n"):
        assert review(force=False)["reason"] == "background_review_disabled"
        assert review(force=True)["status"] == "nothing_to_save"
    with model.configure("[fermix_core.memory]\nenabled = false\n"):
        assert review(force=True)["reason"] == "memory_disabled"


def test_a_live_claim_blocks_a_second_review_and_an_expired_one_does_not(model):
    say("I like tea")
    ReviewState.objects.create(agent_id="main", conversation_key="telegram:1:root", claimed_by="someone",
                               claim_expires_at=timezone.now() + timedelta(minutes=5))
    assert review()["reason"] == "already_running"
    ReviewRun.objects.create(agent_id="main", conversation_key="telegram:1:root", owner_id="default",
                             trigger="compaction", started_at=timezone.now() - timedelta(minutes=10))
    ReviewState.objects.update(claim_expires_at=timezone.now() - timedelta(seconds=1))
    model.push(Reply(text="Nothing to save."))
    assert review()["status"] == "nothing_to_save"
    abandoned = ReviewRun.objects.get(trigger="compaction")
    assert abandoned.status == "failed" and abandoned.reason.startswith("abandoned")
