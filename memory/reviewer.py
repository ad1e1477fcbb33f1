"""The background memory reviewer: gates, an atomic per-conversation claim, one model call, one write.

A review reads, takes its claim and records its run in one transaction, calls the model with no
transaction open, then writes everything else (operations, the model's answer and the run's outcome, the
cursor advance, the claim's release) in ONE short transaction that re-checks its claim. A worker killed
mid-review leaves only its claim, which expires, and its run marked running, which the next review marks
abandoned; nothing is half-applied.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import DatabaseError, transaction
from django.db.models import Exists, F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from fermix_site.conf import conf
from fermix_site.enqueue import enqueue_after_commit
from memory import review_ops, review_parse
from memory.admission import PROPOSED, Writer
from memory.conversations import ConversationKey
from memory.errors import CodedError
from memory.models import Conversation, Message, ReviewOperation, ReviewRun, ReviewState, Role, Trust
from memory.prompt_files import (
    FILE_NAMES,
    RenderedFiles,
    carry_forward,
    prompt_files_rebuild_after_commit,
    render_files,
)
from memory.rows import conversation_source, memory_archive, memory_decide, memory_revert
from providers.chain import chat
from providers.errors import ProviderError

logger = logging.getLogger("fermix.memory.reviewer")

REVIEWABLE_KINDS = ("chat", "voice_turn")
OK, NOTHING, SKIPPED, FAILED = "ok", "nothing_to_save", "skipped", "failed"
MAX_OUTPUT_TOKENS = 2000


class PendingMessage(NamedTuple):
    """What a review reads of a message."""

    id: int
    owner_id: str
    trust: str
    content: str
    created_at: datetime




def reviewable() -> Q:
    """The messages a review reads: sent by the user, chat or voice, not guest-flagged."""
    return Q(role=Role.USER, kind__in=REVIEWABLE_KINDS) & ~Q(trust=Trust.GUEST)


class ReviewBusy(Exception):
    """A review of this conversation is already running."""

    code = "review_running"


def claim_ttl() -> timedelta:
    """Longer than the model call may take (each provider of the chain may time out in turn), so a live
    review never loses its claim, yet a dead worker's claim expires."""
    attempts = max(1, len(conf.provider_chain))
    return timedelta(milliseconds=conf.timeouts.llm_buffered_ms * attempts) + timedelta(seconds=60)


def _result(key: str, status: str, reason: str = "", run: ReviewRun | None = None) -> dict:
    return {
        "conversation": key, "status": status, "reason": reason,
        "ops_added": run.ops_added if run else 0, "ops_replaced": run.ops_replaced if run else 0,
        "ops_archived": run.ops_archived if run else 0, "ops_skipped": run.ops_skipped if run else 0,
        "input_messages": run.input_messages if run else 0, "input_tokens": run.input_tokens if run else 0,
        "run_id": run.id if run else None,
        # Why operations were skipped, by code (`docs/reviewer.md`, Skip codes): one query, only when some were.
        "skipped_by_code": review_ops.skipped_by_code([run.id]).get(run.id, {}) if run and run.ops_skipped else {},
    }


def _state(agent_id: str, key: str) -> ReviewState:
    return ReviewState.objects.get_or_create(agent_id=agent_id, conversation_key=key)[0]


def pending_rows(agent_id: str, key: ConversationKey, cursor: int, upto_id: int | None, limit: int):
    """The reviewable messages after the cursor (up to `upto_id`), oldest first, at most `limit`."""
    rows = Message.objects.filter(reviewable(), agent_id=agent_id, id__gt=cursor, **key.filter())
    if upto_id is not None:
        rows = rows.filter(id__lte=upto_id)
    fields = rows.order_by("id").values_list("id", "owner_id", "trust", "content", "created_at")[:limit]
    return [PendingMessage(*row) for row in fields]


def gate(state: ReviewState, *, force: bool, now) -> str | None:
    """Why a review may not run now, or None. `force` (review --now) bypasses interval and backoff."""
    memory = conf.memory
    if not memory.enabled:
        return "memory_disabled"
    if force:
        return None
    if memory.review_interval_hours == 0:
        return "background_review_disabled"
    if state.last_failure_at and now - state.last_failure_at < timedelta(milliseconds=memory.review_failure_backoff_ms):
        return "failure_backoff"
    if state.last_reviewed_at and now - state.last_reviewed_at < timedelta(hours=memory.review_interval_hours):
        return "under_interval"
    return None


def claim(state: ReviewState, token: str, now, run: ReviewRun) -> bool:
    """Take the conversation's claim if nobody holds a live one (conditional UPDATE: row count decides)
    and, in the same transaction, record `run` as started.

    A run of this conversation still marked running when we get the claim lost its worker (its claim
    expired): it is marked failed there too. Such a run leaves its claim behind (every way a review
    ends releases the claim in the same transaction that ends the run), so with no claim on the state
    as read there is none to look for.
    """
    free = Q(claim_expires_at__isnull=True) | Q(claim_expires_at__lt=now)
    with transaction.atomic():
        taken = ReviewState.objects.filter(pk=state.pk).filter(free).update(
            claimed_by=token, claim_expires_at=now + claim_ttl(), status="running")
        if taken != 1:
            return False
        if state.claimed_by:
            ReviewRun.objects.filter(agent_id=run.agent_id, conversation_key=run.conversation_key,
                                     status=ReviewRun.Status.RUNNING).update(
                status=ReviewRun.Status.FAILED, finished_at=now,
                reason="abandoned: the worker stopped before finishing and its claim expired; nothing was applied")
        run.save(force_insert=True)
    return True


def _release_failed(state: ReviewState, token: str, run: ReviewRun | None, error: str) -> None:
    now = timezone.now()
    with transaction.atomic():
        ReviewState.objects.filter(pk=state.pk, claimed_by=token).update(
            claimed_by="", claim_expires_at=None, status=FAILED, failure_count=F("failure_count") + 1,
            last_failure_at=now, last_error=error[:2000])
        if run is not None:  # with the model's answer, when there was one (the run keeps it for inspection)
            ReviewRun.objects.filter(pk=run.pk).update(status=FAILED, reason=error[:2000], finished_at=now,
                                                       model_call_id=run.model_call_id, output=run.output)


def _usage(files: RenderedFiles) -> dict:
    return {FILE_NAMES[resource_type]: {"tokens": rendered.tokens, "cap": rendered.cap}
            for resource_type, rendered in files.files.items()}


def review_conversation(*, agent_id: str, conversation: str | ConversationKey, force: bool = False,
                        trigger: str = "background", upto_id: int | None = None) -> dict:
    """Run the review pipeline for one conversation; returns one `memory_review --json` result item."""
    key = ConversationKey.parse(conversation)
    now = timezone.now()
    state = _state(agent_id, str(key))
    reason = gate(state, force=force, now=now)
    if reason:
        return _result(str(key), SKIPPED, reason)
    candidates = pending_rows(agent_id, key, state.cursor_message_id, upto_id, conf.memory.review_max_messages)
    if not candidates:
        return _result(str(key), SKIPPED, "no_new_messages")
    memory = conf.memory
    packed = review_ops.pack_messages(candidates, max_messages=memory.review_max_messages,
                                      token_budget=memory.review_input_token_budget)
    owner_id = Conversation.objects.filter(agent_id=agent_id, key=str(key)).values_list("owner_id", flat=True).first()
    run = ReviewRun(
        agent_id=agent_id, conversation_key=str(key), owner_id=owner_id or packed.messages[-1].owner_id,
        trigger=trigger, input_message_ids=[m.id for m in packed.messages], input_tokens=packed.tokens,
        cursor_before=state.cursor_message_id, started_at=timezone.now(),
    )
    token = uuid.uuid4().hex
    if not claim(state, token, now, run):
        return _result(str(key), SKIPPED, "already_running")
    try:
        _run(run, key, state, token, packed)
    except (ProviderError, review_parse.UnparseableOutput, DatabaseError, ValueError) as exc:
        logger.warning("review of %s/%s failed: %s", agent_id, key, exc)
        _release_failed(state, token, run, f"{type(exc).__name__}: {exc}")
        run.refresh_from_db()
        return _result(str(key), FAILED, run.reason[:500], run)
    return _result(str(key), run.status, run.reason, run)


def _run(run: ReviewRun, key: ConversationKey, state: ReviewState, token: str, packed) -> None:
    agent_id = run.agent_id
    rows = review_ops.state_rows(agent_id, run.owner_id)
    files = render_files(agent_id)
    messages = review_ops.build_messages(packed, rows, _usage(files), conf.memory.review_input_token_budget)
    # No transaction is open here: the model may take minutes.
    answer = chat(messages=messages, agent_tag="memory_reviewer", agent_id=agent_id, conversation_key=str(key),
                  max_tokens=MAX_OUTPUT_TOKENS, temperature=0)
    # Recorded with the run's outcome: by _commit, or by _release_failed when the answer is refused.
    run.model_call_id, run.output = answer.call_id, answer.text[:20000]
    operations = review_parse.parse_output(answer.text)
    trust = Trust.OPERATOR if all(m.trust == Trust.OPERATOR for m in packed.messages) else Trust.GUEST
    writer = Writer(kind="reviewer", agent_id=agent_id, owner_id=run.owner_id, trust=trust, conversation=key,
                    actor_id=f"run:{run.id}", run_id=run.id)
    batch = review_ops.prepare(operations, writer=writer, message_ids=run.input_message_ids, rows=rows)
    applied = _commit(run, state, token, writer, operations, packed, batch)
    if applied.memory_ids:
        # A file none of the changed rows renders into renders as it did for the model: the rebuild
        # reuses that rendering unless someone else changed the agent's rows meanwhile.
        carry_forward(files, writes=len(applied.memory_ids), changed=applied.files)
        _rebuild_after(run, applied.memory_ids)


def _rebuild_after(run: ReviewRun, memory_ids: list[int]) -> None:
    """The rows are committed; a failed rebuild (a full disk) must not undo them, nor fail the run. The
    next rebuild (after any memory change, or the hourly schedule) writes the files; the run's reason
    (and so the review's JSON) says what happened."""
    rebuild = prompt_files_rebuild_after_commit(agent_id=run.agent_id, trigger=f"review run {run.id}",
                                                memory_ids=memory_ids, extra_provenance={"review_run": run.id})
    if rebuild.error:
        run.reason = f"applied, but the prompt files were not rebuilt: {rebuild.error}"
        try:
            ReviewRun.objects.filter(pk=run.pk).update(reason=run.reason)
        except DatabaseError as exc:
            logger.error("review run %s: the note that the files were not rebuilt was not stored: %s", run.id, exc)


# What a review writes to its run once the model has answered (the rest was written when it started).
RUN_OUTCOME = ["model_call_id", "output", "status", "reason", "ops_added", "ops_replaced", "ops_archived",
               "ops_skipped", "cursor_after", "finished_at"]


def _commit(run: ReviewRun, state: ReviewState, token: str, writer: Writer, operations, packed,
            batch: review_ops.Batch):
    """Everything a review writes, in one transaction that first re-checks the claim."""
    last_id = packed.messages[-1].id
    now = timezone.now()
    status = ReviewRun.Status.NOTHING_TO_SAVE if operations is None else ReviewRun.Status.OK
    with transaction.atomic():
        # The claim's re-check and its release are one statement: no row updated, no claim.
        released = ReviewState.objects.filter(pk=state.pk, claimed_by=token).update(
            cursor_message_id=last_id, last_reviewed_at=now, claimed_by="", claim_expires_at=None,
            status=status, failure_count=0, last_error="")
        if released != 1:
            raise ValueError("the review's claim expired and was taken by another worker; nothing applied")
        source = conversation_source(writer.agent_id, writer.conversation)
        applied = review_ops.apply_operations(run, writer, operations or [], source, batch)
        run.status = status
        run.reason = "" if operations is not None else "the model found nothing to save"
        run.ops_added, run.ops_replaced, run.ops_archived = applied.added, applied.replaced, applied.archived
        run.ops_skipped, run.cursor_after, run.finished_at = applied.skipped, last_id, now
        run.save(update_fields=RUN_OUTCOME)
    return applied


def conversations_with_new_messages(*, agent_id: str, conversation: str | None = None,
                                    owner_id: str | None = None) -> list[str]:
    conversations = Conversation.objects.filter(agent_id=agent_id)
    if conversation:
        conversations = conversations.filter(key=str(ConversationKey.parse(conversation)))
    if owner_id:
        conversations = conversations.filter(owner_id=owner_id)
    # One query: each conversation with a reviewable message past its cursor (what pending_rows reads).
    cursor = ReviewState.objects.filter(agent_id=agent_id, conversation_key=OuterRef(OuterRef("key"))).values(
        "cursor_message_id")[:1]
    pending = Message.objects.filter(
        reviewable(), agent_id=agent_id, channel=OuterRef("channel"), chat_id=OuterRef("chat_id"),
        thread_scope=OuterRef("thread_scope"), id__gt=Coalesce(Subquery(cursor), Value(0)))
    return list(conversations.filter(Exists(pending)).order_by("key").values_list("key", flat=True))


def review_now(*, agent_id: str, conversation: str | None = None, owner_id: str | None = None,
               progress=None) -> dict:
    """`memory_review --now`: review every conversation with new messages, past the interval and backoff."""
    if conversation:
        key = str(ConversationKey.parse(conversation))
        state = ReviewState.objects.filter(agent_id=agent_id, conversation_key=key).first()
        if state and state.claim_expires_at and state.claim_expires_at > timezone.now():
            raise ReviewBusy(f"a review of {key} is already running")
    keys = conversations_with_new_messages(agent_id=agent_id, conversation=conversation, owner_id=owner_id)
    if conversation and not keys:
        key = str(ConversationKey.parse(conversation))
        return {"total": 1, "results": [_result(key, SKIPPED, "no_new_messages")]}
    results = []
    for index, key in enumerate(keys, start=1):
        results.append(review_conversation(agent_id=agent_id, conversation=key, force=True, trigger="now"))
        if progress:
            progress(index, len(keys), results[-1])
    return {"total": len(results), "results": results}


def review_start_background(*, agent_id: str, conversation: str | ConversationKey) -> str:
    """Enqueue a background review after the current transaction commits; never blocks the turn."""
    memory = conf.memory
    if not memory.enabled:
        return "disabled"
    if memory.review_interval_hours == 0:
        return "disabled"
    key = str(ConversationKey.parse(conversation))
    enqueue_after_commit("memory.tasks.review_conversation_task", agent_id, key,
                         task_name=f"review {agent_id}/{key}"[:100])
    return "queued"


class UndoError(CodedError):
    """An undo refused; nothing was reversed."""


def _undo_one(operation: ReviewOperation, actor: str, run_id: int) -> None:
    reason = f"undo of review run {run_id}"
    row = operation.memory
    if operation.action == PROPOSED:  # withdrawn: the change it waits with is rejected
        memory_decide(memory_id=row.id, approve=False, actor_id=actor, reason=reason)
    elif operation.before_archived is None:  # the run created the row: archive it
        memory_archive(memory_id=row.id, archived_by=actor, reason=reason, actor_type="operator", actor_id=actor)
    else:
        memory_revert(memory_id=row.id, value=operation.before_value, category=operation.before_category,
                      archived=operation.before_archived, actor_type="operator", actor_id=actor, reason=reason)


def _changed_since(operation: ReviewOperation) -> bool:
    row = operation.memory
    if row is None:
        return True
    if operation.action == PROPOSED:  # the owner decided meanwhile
        return row.pending is None
    archived_after = operation.action == "archive"
    return row.value != operation.after_value or (row.archived_at is not None) != archived_after


def review_undo(*, run_id: int, actor: str) -> dict:
    """Reverse every applied operation of a review run as one unit, then rebuild the prompt files.

    Refused when a row the run touched has changed since (undoing would discard the later change).
    """
    with transaction.atomic():
        run = ReviewRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            raise UndoError("not_found", f"review run {run_id} does not exist")
        if run.status == ReviewRun.Status.UNDONE:
            raise UndoError("already_undone", f"review run {run_id} was already undone")
        applied = list(run.operations.filter(status="applied").select_related("memory").order_by("-index"))
        changed = [op.memory_id for op in applied if _changed_since(op)]
        if changed:
            raise UndoError("conflict", f"rows changed since review run {run_id}: {changed}; undo them one by one")
        for operation in applied:
            _undo_one(operation, actor, run.id)
        run.status, run.undone_at, run.undone_by = ReviewRun.Status.UNDONE, timezone.now(), actor[:200]
        run.save(update_fields=["status", "undone_at", "undone_by"])
    memory_ids = [op.memory_id for op in applied]
    warnings = []
    if memory_ids:
        warnings = prompt_files_rebuild_after_commit(
            agent_id=run.agent_id, trigger=f"undo of review run {run.id}", memory_ids=memory_ids,
            extra_provenance={"review_run": run.id, "undo": True}).warnings
    return {"run_id": run.id, "status": run.status, "operations_reversed": len(applied), "warnings": warnings}
