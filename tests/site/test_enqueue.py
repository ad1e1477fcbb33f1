"""A broker that refuses tasks never fails the request that asked for one, and loses no task.

django-q2 is pointed at a Redis port where nothing listens (its own configuration, not our code), so
every enqueue meets a real connection refusal; put back on the ORM broker, the node heartbeat queues the
kept tasks again.
"""

import socket

import pytest
from django.db import transaction
from django_q.conf import Conf
from django_q.models import OrmQ

from fermix_site import node
from fermix_site.enqueue import enqueue, enqueue_after_commit, enqueue_deferred
from fermix_site.models import DeferredTask
from memory.conversations import message_append
from memory.turns import turn_commit

pytestmark = pytest.mark.django_db(transaction=True)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends: nothing listens there


@pytest.fixture
def broker_down(monkeypatch):
    monkeypatch.setattr(Conf, "ORM", None)
    monkeypatch.setattr(Conf, "REDIS", f"redis://127.0.0.1:{closed_port()}/0")
    yield
    monkeypatch.undo()


def test_a_refused_task_is_kept_and_queued_again_when_the_broker_answers(home, broker_down, monkeypatch):
    assert enqueue("memory.tasks.review_conversation_task", "main", "telegram:1", task_name="review") is False
    kept = DeferredTask.objects.get()
    assert (kept.func, kept.args, kept.options) == ("memory.tasks.review_conversation_task",
                                                    ["main", "telegram:1"], {"task_name": "review"})
    assert "Connection" in kept.error
    assert enqueue_deferred() == 0  # still down: kept
    assert DeferredTask.objects.count() == 1
    monkeypatch.undo()  # the broker is back
    assert enqueue_deferred() == 1
    assert not DeferredTask.objects.exists()
    assert OrmQ.objects.count() == 1


def test_work_a_schedule_does_anyway_is_not_kept(home, broker_down):
    assert enqueue("memory.tasks.embed_pending_task", keep=False) is False
    assert not DeferredTask.objects.exists()


def test_a_commit_while_the_broker_is_down_succeeds_and_its_review_waits(home, broker_down, monkeypatch):
    message_append(agent_id="main", conversation="telegram:7", role="user", content="I am vegetarian",
                   trust="operator")
    result = turn_commit(agent_id="main", conversation="telegram:7", trust="operator")
    assert result["review"] == "queued"
    assert list(DeferredTask.objects.values_list("func", "args")) == [
        ("memory.tasks.review_conversation_task", ["main", "telegram:7:root"])]
    monkeypatch.undo()
    node.beat()  # the node heartbeat's parts, this one among them
    assert not DeferredTask.objects.exists() and OrmQ.objects.count() == 1


def test_the_task_is_queued_only_after_the_commit(home):
    with transaction.atomic():
        enqueue_after_commit("memory.tasks.embed_pending_task", keep=False)
        assert OrmQ.objects.count() == 0
    assert OrmQ.objects.count() == 1
