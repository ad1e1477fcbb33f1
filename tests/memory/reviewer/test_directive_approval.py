"""Directives wait for the owner: with `directive_approval = true` every directive change the reviewer
makes (add, replace, archive) is a proposal that renders nowhere until an operator approves it."""

import pytest

from fermix_site.conf import conf
from memory.models import Memory, MemoryEvent, ReviewOperation
from memory.reviewer import review_undo
from memory.rows import MemoryRowError, memory_decide, memory_history, memory_pending
from tests.memory.reviewer.conftest import review, say
from tests.memory_factories import fact
from tests.personas import ops

pytestmark = pytest.mark.django_db
APPROVAL = "[fermix_core.memory]\ndirective_approval = true\n"
RULE = {"op": "add", "category": "directive", "key": "reply_style", "value": "answer in short paragraphs"}


def memory_md() -> str:
    path = conf.memory_dir("main") / "MEMORY.md"
    return path.read_text() if path.exists() else ""


def actions(row) -> list[str]:
    return [e.action for e in memory_history(memory_id=row.id).order_by("id")]


def test_a_proposed_directive_renders_only_once_approved(model):
    with model.configure(APPROVAL):
        say("from now on, answer in short paragraphs")
        model.push(ops(RULE, {"op": "add", "category": "identity", "key": "job", "value": "works as a nurse"}))
        review()
        row = Memory.objects.get(key="reply_style")
        assert row.pending == {"state": "pending", "op": "add"} and row.archived_at is not None
        assert "short paragraphs" not in memory_md()  # waiting: not rendered...
        assert Memory.objects.get(key="job").archived_at is None  # ...while a fact is applied at once
        assert list(memory_pending(agent_id="main")) == [row]
        assert ReviewOperation.objects.get(memory=row).action == "propose"
        approved = memory_decide(memory_id=row.id, approve=True, actor_id="ana")
        assert approved.archived_at is None and approved.approval["state"] == "approved"
        assert approved.approval["by"] == "ana" and not memory_pending(agent_id="main").exists()
    assert actions(row) == ["propose", "approve"]


def test_without_approval_directives_apply_as_before(model):
    say("from now on, answer in short paragraphs")
    model.push(ops(RULE))
    review()
    row = Memory.objects.get(key="reply_style")
    assert row.archived_at is None and row.approval is None and "- answer in short paragraphs" in memory_md()


def test_a_replace_or_archive_of_a_live_directive_waits_and_the_rule_stays_meanwhile(model):
    rule = fact("reply_style", "answer in short paragraphs", "directive")
    other = fact("greeting", "greet the owner by name", "directive")
    with model.configure(APPROVAL):
        say("actually use bullet points, and stop greeting me")
        model.push(ops({"op": "replace", "id": rule.id, "value": "answer in bullet points"},
                       {"op": "archive", "id": other.id}))
        review()
        rule.refresh_from_db()
        other.refresh_from_db()
        assert rule.value == "answer in short paragraphs" and rule.pending["value"] == "answer in bullet points"
        assert other.archived_at is None and other.pending["op"] == "archive"
        memory_decide(memory_id=rule.id, approve=True, actor_id="ana")
        memory_decide(memory_id=other.id, approve=False, actor_id="ana", reason="keep greeting me")
    rule.refresh_from_db()
    other.refresh_from_db()
    assert rule.value == "answer in bullet points" and other.archived_at is None
    assert other.approval["state"] == "rejected"
    event = memory_history(memory_id=other.id).order_by("-id").first()
    assert (event.action, event.reason) == (MemoryEvent.Action.REJECT, "keep greeting me")


def test_a_rejected_proposal_never_renders_and_a_decision_is_made_once(model):
    with model.configure(APPROVAL):
        say("remember to always sign off with 'cheers'")
        model.push(ops({**RULE, "key": "sign_off", "value": "sign off every answer with 'cheers'"}))
        review()
        row = Memory.objects.get(key="sign_off")
        memory_decide(memory_id=row.id, approve=False, actor_id="ana")
        with pytest.raises(MemoryRowError) as twice:
            memory_decide(memory_id=row.id, approve=True, actor_id="ana")
    assert twice.value.code == "not_pending"
    row.refresh_from_db()
    assert row.archived_at is not None and "cheers" not in memory_md()


def test_undoing_the_run_withdraws_its_proposal(model):
    with model.configure(APPROVAL):
        say("from now on, answer in short paragraphs")
        model.push(ops(RULE))
        review()
        row = Memory.objects.get(key="reply_style")
        review_undo(run_id=ReviewOperation.objects.get(memory=row).run_id, actor="ana")
    row.refresh_from_db()
    assert row.pending is None and row.approval["state"] == "rejected" and row.archived_at is not None
    assert actions(row) == ["propose", "reject"]
