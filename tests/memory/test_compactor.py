"""Compaction: trigger math, what stays, checkpoints that chain, no lost or re-reviewed messages."""

import json
import logging
import subprocess
import sys
from datetime import timedelta
from functools import partial

import pytest
from django.db import connection
from django.utils import timezone
from django_q.models import OrmQ

from fermix_site.conf import conf
from memory.compactor import NOTICE, CompactionError, compact, compact_now, compaction_preflight, over_threshold
from memory.conversations import window_clear, window_read
from memory.models import Conversation, Memory, Message, ReviewRun, ReviewState
from memory.tasks import compact_conversation_task
from memory.tools import ToolContext, run_tool
from memory.turns import turn_commit
from resources.models import ResourceRevision
from tests import personas
from tests.conftest import ROOT, process_env
from tests.fakeprovider import Reply, error

pytestmark = pytest.mark.django_db

CONV = "telegram:1"
WINDOW = 2000  # tokens: compaction keeps ~744 tokens of newest messages (half, less room for the summary)


say = partial(personas.say, conversation=CONV)


@pytest.fixture
def model(model):
    with model.configure(context_window=WINDOW):
        yield model


def fill(n, size=1000):
    return [say(f"m{i} " + "x" * (size - 4), role="user" if i % 2 == 0 else "assistant") for i in range(n)]


def answer_by_tag(summary="Summary of the older messages.", review="Nothing to save."):
    def responder(request):
        system = request.body["messages"][0]["content"]
        return Reply(text=review if "long-term memory" in system else summary)
    return responder


def test_the_trigger_is_peak_tokens_against_threshold_times_window(home):
    assert over_threshold(850, 1000) and over_threshold(900, 1000)
    assert not over_threshold(849, 1000)
    assert not over_threshold(None, 1000) and not over_threshold(900, None)


def test_compaction_keeps_the_newest_messages_and_heads_the_window_with_a_checkpoint(model):
    model.responder = answer_by_tag()
    messages = fill(8)
    result = compact(agent_id="main", conversation=CONV, reason="test")
    assert result == {"compacted": True, "messages": 6, "revision": 1, "reason": "test"}
    window = window_read(agent_id="main", conversation=CONV)
    assert [m.kind for m in window] == ["checkpoint", "chat", "chat"]
    assert window[0].content == "Summary of the older messages."
    assert [m.id for m in window[1:]] == [messages[6].id, messages[7].id]
    assert Message.objects.filter(kind="chat").count() == 8  # nothing deleted, ids kept
    revision = ResourceRevision.objects.get(resource_type="checkpoint")
    assert (revision.scope_id, revision.mutation_source, revision.content) == (
        "telegram:1:root", "compaction", "Summary of the older messages.")
    assert (revision.provenance["summarised_from"], revision.provenance["summarised_to"]) == (
        messages[0].id, messages[5].id)
    from providers.models import ModelCall
    assert ModelCall.objects.filter(agent_tag="compactor").count() == 1
    assert model.requests[-1].body.get("reasoning_effort") == "medium"


def test_leading_system_messages_stay_in_the_window(model):
    model.responder = answer_by_tag()
    rule = say("You are talking to Ana's family group.", role="system")
    fill(8)
    compact(agent_id="main", conversation=CONV, reason="test")
    window = window_read(agent_id="main", conversation=CONV)
    assert window[0].id == rule.id and window[1].kind == "checkpoint"
    compact(agent_id="main", conversation=CONV, reason="again", summarise_all=True)
    assert window_read(agent_id="main", conversation=CONV)[0].id == rule.id


def test_checkpoints_chain(model):
    model.responder = answer_by_tag(summary="First summary.")
    fill(8)
    compact(agent_id="main", conversation=CONV, reason="test")
    model.responder = answer_by_tag(summary="Second summary.")
    fill(6)
    compact(agent_id="main", conversation=CONV, reason="test")
    last_request = model.requests[-1].body["messages"][1]["content"]
    assert last_request.startswith("Previous summary:\nFirst summary.")
    revisions = list(ResourceRevision.objects.filter(resource_type="checkpoint").order_by("revision"))
    assert [r.content for r in revisions] == ["First summary.", "Second summary."]
    assert revisions[1].parent_revision == 1
    assert window_read(agent_id="main", conversation=CONV)[0].content == "Second summary."


def test_unreviewed_messages_are_reviewed_before_they_are_summarised_and_never_again(model):
    model.responder = answer_by_tag(review=json.dumps({"operations": [
        {"op": "add", "category": "identity", "key": "city", "value": "lives in Lisbon"}]}))
    fill(8)
    compact(agent_id="main", conversation=CONV, reason="test")
    tags = [r.body["messages"][0]["content"][:40] for r in model.requests]
    assert "long-term memory" in tags[0] and "running summary" in tags[-1]
    assert Memory.objects.get().value == "lives in Lisbon"
    summarised_to = ResourceRevision.objects.get(resource_type="checkpoint").provenance["summarised_to"]
    summarised_user_ids = set(Message.objects.filter(role="user", id__lte=summarised_to).values_list("id", flat=True))
    first_runs = set().union(*(set(r.input_message_ids) for r in ReviewRun.objects.all()))
    assert summarised_user_ids <= first_runs  # every summarised user message was reviewed first

    from memory.reviewer import review_conversation
    model.responder = lambda request: Reply(text="Nothing to save.")
    review_conversation(agent_id="main", conversation=CONV, force=True)
    later = ReviewRun.objects.order_by("-id").first()
    assert not set(later.input_message_ids) & summarised_user_ids  # and never reviewed again


def test_summarised_messages_stay_searchable(model):
    model.responder = answer_by_tag()
    say("I started the pottery class in May " + "y" * 400)
    fill(6)
    compact(agent_id="main", conversation=CONV, reason="test")
    ctx = ToolContext(agent_id="main", owner_id="default", conversation=None, trust="operator")
    found = run_tool("memory_recall", ctx, {"query": "pottery class", "source": "history", "scope": "owner"})
    assert found.ok and found.data[0]["content"].startswith("I started the pottery class")


def test_preflight_skips_a_cold_conversation_and_compacts_past_the_threshold(model):
    model.responder = answer_by_tag()
    fill(8)
    assert compaction_preflight(agent_id="main", conversation=CONV) == {"compacted": False, "notice": None}
    turn_commit(agent_id="main", conversation=CONV, peak_prompt_tokens=1699)
    assert compaction_preflight(agent_id="main", conversation=CONV) == {"compacted": False, "notice": None}
    turn_commit(agent_id="main", conversation=CONV, peak_prompt_tokens=1700)
    assert compaction_preflight(agent_id="main", conversation=CONV) == {"compacted": True, "notice": NOTICE}
    assert NOTICE == "Trimmed older conversation history to stay within the context window."
    assert Conversation.objects.get().last_peak_prompt_tokens is None  # measured before: no longer true
    assert compaction_preflight(agent_id="main", conversation=CONV)["compacted"] is False


@pytest.mark.django_db(transaction=True)
def test_commit_enqueues_the_review_and_the_post_delivery_compaction(model):
    fill(8)
    assert turn_commit(agent_id="main", conversation=CONV, peak_prompt_tokens=100)["compaction"] == "not_needed"
    result = turn_commit(agent_id="main", conversation=CONV, peak_prompt_tokens=1800, context_window=WINDOW)
    assert (result["review"], result["compaction"]) == ("queued", "queued")
    funcs = sorted(OrmQ.objects.all(), key=lambda q: q.id)
    assert [q.func() for q in funcs][-2:] == ["memory.tasks.review_conversation_task",
                                             "memory.tasks.compact_conversation_task"]


def test_a_failed_compaction_backs_off_for_60_seconds(model):
    fill(8)
    model.responder = lambda request: error(400, "bad request") if "running summary" in \
        request.body["messages"][0]["content"] else Reply(text="Nothing to save.")
    turn_commit(agent_id="main", conversation=CONV, peak_prompt_tokens=1800)
    assert compaction_preflight(agent_id="main", conversation=CONV)["compacted"] is False
    assert Conversation.objects.get().compaction_failed_at is not None
    calls = len(model.requests)
    assert compaction_preflight(agent_id="main", conversation=CONV)["compacted"] is False
    assert len(model.requests) == calls  # backing off: no second attempt
    with pytest.raises(CompactionError):
        compact(agent_id="main", conversation=CONV, reason="manual")
    assert len(window_read(agent_id="main", conversation=CONV)) == 8


@pytest.mark.django_db(transaction=True)
def test_a_compaction_whose_window_moved_meanwhile_is_an_info_line_not_a_failure(model, caplog):
    fill(8)

    def clear_while_summarising(request):
        if "running summary" not in request.body["messages"][0]["content"]:
            return Reply(text="Nothing to save.")
        window_clear(agent_id="main", conversation=CONV)  # a /clear from another worker meanwhile
        connection.close()
        return Reply(text="Too late.")

    model.responder = clear_while_summarising
    with caplog.at_level(logging.INFO):
        result = compact_conversation_task("main", "telegram:1:root", WINDOW)
    assert result == {"compacted": False, "messages": 0, "reason": "window_moved"}
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert [(r.levelname, r.exc_info) for r in skipped] == [("INFO", None)]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert Conversation.objects.get().compaction_failed_at is None  # a race is not backed off
    assert not Message.objects.filter(kind="checkpoint").exists()


def test_a_review_already_running_before_a_compaction_is_an_info_line(model, caplog):
    model.responder = answer_by_tag()
    fill(8)
    ReviewState.objects.create(agent_id="main", conversation_key="telegram:1:root", claimed_by="another-worker",
                               claim_expires_at=timezone.now() + timedelta(minutes=5), status="running")
    with caplog.at_level(logging.INFO):
        assert compact(agent_id="main", conversation=CONV, reason="test")["compacted"]
    skipped = [r for r in caplog.records if "review before compaction" in r.getMessage()]
    assert [(r.levelname, r.getMessage().split(": ")[1]) for r in skipped] == [("INFO", "skipped already_running")]


def test_the_compact_command_and_clear(model):
    assert compact_now(agent_id="main", conversation=CONV)["message"].startswith("Nothing to compact yet")
    model.responder = answer_by_tag()
    fill(3)
    assert compact_now(agent_id="main", conversation=CONV)["message"] == (
        "Compacted 3 message(s) into a checkpoint (checkpoint revision 1).")
    assert [m.kind for m in window_read(agent_id="main", conversation=CONV)] == ["checkpoint"]
    say("hello again")
    assert window_clear(agent_id="main", conversation=CONV) == 1
    assert window_read(agent_id="main", conversation=CONV) == []
    assert ResourceRevision.objects.filter(resource_type="checkpoint").count() == 1
    assert Message.objects.count() == 5


COMPACT_ELSEWHERE = """
import django; django.setup()
from memory.compactor import compact_now
print(compact_now(agent_id="main", conversation="telegram:1")["message"])
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_compaction_in_another_process_is_seen_at_once(model):
    model.responder = answer_by_tag()
    fill(4)
    assert len(window_read(agent_id="main", conversation=CONV)) == 4  # cached here
    out = subprocess.run([sys.executable, "-c", COMPACT_ELSEWHERE], cwd=ROOT, check=True, capture_output=True,
                         text=True, env=process_env(FERMIX_HOME=conf.home)).stdout
    assert "Compacted 4 message(s)" in out
    assert [m.kind for m in window_read(agent_id="main", conversation=CONV)] == ["checkpoint"]
