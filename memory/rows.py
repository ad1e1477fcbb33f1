"""Memory rows: upsert by the unique key, replace by id, archive, restore, list.

Every change is one short transaction that also appends a `MemoryEvent` (the per-fact history) and
bumps the agent's `memories:<agent>` generation, so every process's cached rows and prompts see it.
Outdated rows are archived, never deleted.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from fermix_site import generations
from fermix_site.conf import valid_id
from memory.errors import CodedError
from memory.models import (
    APPROVAL_PENDING,
    Category,
    Memory,
    MemoryEvent,
    MemorySource,
    ScopeType,
    memories_generation,
)
from memory.prompt_files import promote_target_for
from memory.vectors import forget_memory_vectors, queue_embedding

MAX_VALUE_CHARS = 200
MAX_KEY_CHARS = 200
ACTOR_TYPES = {"reviewer", "tool", "operator", "job", "system", "import"}

_row_cache = generations.local_cache(max_entries=8192)


class MemoryRowError(CodedError):
    """A refused memory write; `code` names the problem (for API errors and review-op skip reasons)."""


NOT_FOUND = "not_found"
VALUE_TOO_LONG = "value_too_long"


def validate_value(value) -> str:
    """A memory value: non-empty text of at most 200 characters, or a MemoryRowError saying to shorten it."""
    if not isinstance(value, str) or not value.strip():
        raise MemoryRowError("invalid_value", "value must be non-empty text")
    value = value.strip()
    if "\x00" in value:
        raise MemoryRowError("invalid_value", "value must not contain NUL characters")
    if len(value) > MAX_VALUE_CHARS:
        raise MemoryRowError(
            VALUE_TOO_LONG,
            f"value is {len(value)} characters; the limit is {MAX_VALUE_CHARS}: shorten it to one concise fact",
        )
    return value


def _validate_row(*, agent_id, owner_id, scope_type, scope_id, key, category, confidence, actor_type) -> None:
    if not valid_id(agent_id):
        raise MemoryRowError("invalid_agent", f"agent id {agent_id!r} is invalid")
    if not valid_id(owner_id):
        raise MemoryRowError("invalid_owner", f"owner id {owner_id!r} is invalid")
    if scope_type not in ScopeType.values:
        raise MemoryRowError("invalid_scope", f"scope_type must be one of {', '.join(ScopeType.values)}")
    if not isinstance(scope_id, str) or not scope_id or len(scope_id) > 600:
        raise MemoryRowError("invalid_scope", "scope_id must be non-empty text of at most 600 characters")
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_CHARS or "\x00" in key:
        raise MemoryRowError("invalid_key", f"key must be non-empty text of at most {MAX_KEY_CHARS} characters")
    if category and category not in Category.values:
        raise MemoryRowError(
            "invalid_category", f"category must be one of {', '.join(Category.values)}, got {category!r}"
        )
    if not 0.0 <= float(confidence) <= 1.0:
        raise MemoryRowError("invalid_confidence", "confidence must be from 0 to 1")
    if actor_type not in ACTOR_TYPES:
        raise MemoryRowError("invalid_actor", f"actor_type must be one of {', '.join(sorted(ACTOR_TYPES))}")


def _event(memory: Memory, action: str, *, before: Memory | None, actor_type: str, actor_id: str, reason: str,
           run_id: int | None = None, message_ids: list[int] | None = None):
    if action != MemoryEvent.Action.ADD:  # a changed, archived or restored row is embedded again, if live
        forget_memory_vectors([memory.id], memory.agent_id)
    if memory.archived_at is None:
        queue_embedding()
    MemoryEvent.objects.create(
        memory=memory,
        action=action,
        before_value=before.value if before else None,
        after_value=memory.value,
        before_category=before.category if before else "",
        after_category=memory.category,
        actor_type=actor_type,
        actor_id=str(actor_id)[:200],
        run_id=run_id,
        reason=reason or "",
        message_ids=list(message_ids or []),
        created_at=timezone.now(),
    )


def same_content(memory: Memory, value: str, category: str | None) -> bool:
    """Would writing `value` (and `category`, None: kept) to this live row change nothing?"""
    return (not memory.is_archived and memory.value == value.strip()
            and (category is None or category == memory.category))


def _snapshot(memory: Memory) -> Memory:
    return Memory(value=memory.value, category=memory.category)


def memory_upsert(
    *,
    agent_id: str,
    owner_id: str,
    scope_type: str,
    scope_id: str,
    key: str,
    value: str,
    category: str = "",
    confidence: float = 1.0,
    source: MemorySource | None = None,
    actor_type: str,
    actor_id: str = "",
    reason: str = "",
    session_id: str = "",
    run_id: int | None = None,
    source_message_id: int | None = None,
    message_ids: list[int] | None = None,
) -> tuple[Memory, str]:
    """Write a row by its unique key. Returns (row, action) with action add, replace, resave or unchanged.

    An archived row with the same key is brought back with the new value (`resave`), so the key's
    history stays on one row.
    """
    value = validate_value(value)
    key = key.strip()
    _validate_row(agent_id=agent_id, owner_id=owner_id, scope_type=scope_type, scope_id=scope_id, key=key,
                  category=category, confidence=confidence, actor_type=actor_type)
    now = timezone.now()
    provenance = dict(
        source=source,
        source_type=source.source_type if source else "",
        source_name=source.name if source else "",
        source_description=source.description if source else "",
        session_id=session_id,
        run_id=run_id,
        source_message_id=source_message_id,
    )
    with transaction.atomic():
        existing = memory_by_key(agent_id=agent_id, owner_id=owner_id, scope_type=scope_type, scope_id=scope_id,
                                 key=key, lock=True)
        if existing is None:
            memory = Memory.objects.create(
                agent_id=agent_id, owner_id=owner_id, scope_type=scope_type, scope_id=scope_id, key=key,
                value=value, category=category, promote_target=promote_target_for(category),
                confidence=confidence, created_at=now, updated_at=now, **provenance,
            )
            action, before = MemoryEvent.Action.ADD, None
        else:
            if same_content(existing, value, category):
                return existing, "unchanged"
            before = _snapshot(existing)
            action = MemoryEvent.Action.RESAVE if existing.is_archived else MemoryEvent.Action.REPLACE
            existing.value, existing.category, existing.confidence = value, category, confidence
            existing.promote_target = promote_target_for(category)
            existing.archived_at, existing.archived_by, existing.archive_reason = None, "", ""
            existing.updated_at = now
            for name, field_value in provenance.items():
                setattr(existing, name, field_value)
            existing.save()
            memory = existing
        _event(memory, action, before=before, actor_type=actor_type, actor_id=actor_id, reason=reason, run_id=run_id,
               message_ids=message_ids)
        generations.bump(memories_generation(agent_id))
    return memory, str(action)


def memory_by_key(*, agent_id: str, owner_id: str, scope_type: str, scope_id: str, key: str,
                  lock: bool = False) -> Memory | None:
    """The row (archived or not) a write by this unique key would change, or None. `lock`: the row stays
    locked until the transaction ends (PostgreSQL; SQLite's IMMEDIATE transaction holds the write lock)."""
    rows = Memory.objects.filter(agent_id=agent_id, owner_id=owner_id, scope_type=scope_type, scope_id=scope_id,
                                 key=key.strip())
    return (rows.select_for_update() if lock else rows).first()


def _locked(memory_id: int) -> Memory:
    memory = Memory.objects.select_for_update().filter(pk=memory_id).first()
    if memory is None:
        raise MemoryRowError(NOT_FOUND, f"memory row {memory_id} does not exist")
    return memory


def memory_replace(
    *,
    memory_id: int,
    value: str,
    category: str | None = None,
    actor_type: str,
    actor_id: str = "",
    reason: str = "",
    run_id: int | None = None,
    source_message_id: int | None = None,
    message_ids: list[int] | None = None,
) -> Memory:
    """Correct an existing, non-archived row in place (the reviewer's `replace`, the tools' id+value).

    A correction that changes nothing (the same value and category) writes nothing: no event, no
    generation step, so no prompt-file revision either.
    """
    value = validate_value(value)
    if category is not None and category not in Category.values:
        raise MemoryRowError("invalid_category", f"category must be one of {', '.join(Category.values)}")
    with transaction.atomic():
        memory = _locked(memory_id)
        if memory.is_archived:
            raise MemoryRowError("archived", f"memory row {memory_id} is archived; restore it first")
        if same_content(memory, value, category):
            return memory
        before = _snapshot(memory)
        memory.value = value
        if category is not None:
            memory.category, memory.promote_target = category, promote_target_for(category)
        memory.updated_at = timezone.now()
        if run_id:
            memory.run_id = run_id
        if source_message_id:
            memory.source_message_id = source_message_id
        memory.save()
        _event(memory, MemoryEvent.Action.REPLACE, before=before, actor_type=actor_type, actor_id=actor_id,
               reason=reason, run_id=run_id, message_ids=message_ids)
        generations.bump(memories_generation(memory.agent_id))
    return memory


def memory_archive(
    *, memory_id: int, archived_by: str, reason: str = "", actor_type: str = "operator", actor_id: str = "",
    run_id: int | None = None, message_ids: list[int] | None = None,
) -> Memory:
    """Archive a row (kept, restorable); archiving an archived row is refused as `already_archived`."""
    with transaction.atomic():
        memory = _locked(memory_id)
        if memory.is_archived:
            raise MemoryRowError("already_archived", f"memory row {memory_id} is already archived")
        before = _snapshot(memory)
        memory.archived_at = memory.updated_at = timezone.now()
        memory.archived_by, memory.archive_reason = archived_by[:200], reason or ""
        memory.save(update_fields=["archived_at", "archived_by", "archive_reason", "updated_at"])
        _event(memory, MemoryEvent.Action.ARCHIVE, before=before, actor_type=actor_type,
               actor_id=actor_id or archived_by, reason=reason, run_id=run_id, message_ids=message_ids)
        generations.bump(memories_generation(memory.agent_id))
    return memory


def memory_restore(*, memory_id: int, actor_type: str = "operator", actor_id: str = "", reason: str = "") -> Memory:
    """Un-archive a row; restoring a live row is refused as `not_archived`."""
    with transaction.atomic():
        memory = _locked(memory_id)
        if not memory.is_archived:
            raise MemoryRowError("not_archived", f"memory row {memory_id} is not archived")
        before = _snapshot(memory)
        memory.archived_at, memory.archived_by, memory.archive_reason = None, "", ""
        memory.updated_at = timezone.now()
        memory.save(update_fields=["archived_at", "archived_by", "archive_reason", "updated_at"])
        _event(memory, MemoryEvent.Action.RESTORE, before=before, actor_type=actor_type, actor_id=actor_id,
               reason=reason)
        generations.bump(memories_generation(memory.agent_id))
    return memory


def memory_revert(
    *, memory_id: int, value: str, category: str, archived: bool, actor_type: str, actor_id: str = "",
    reason: str = "",
) -> Memory:
    """Put a row back to an earlier state (value, category, archived or not): the undo of a review run."""
    with transaction.atomic():
        memory = _locked(memory_id)
        before = _snapshot(memory)
        now = timezone.now()
        memory.value, memory.category = value, category
        memory.promote_target = promote_target_for(category)
        if archived and not memory.is_archived:
            memory.archived_at, memory.archived_by, memory.archive_reason = now, f"{actor_type}:{actor_id}", reason
        elif not archived:
            memory.archived_at, memory.archived_by, memory.archive_reason = None, "", ""
        memory.updated_at = now
        memory.save()
        _event(memory, MemoryEvent.Action.REVERT, before=before, actor_type=actor_type, actor_id=actor_id,
               reason=reason)
        generations.bump(memories_generation(memory.agent_id))
    return memory


# --- directives waiting for the owner (`[fermix_core.memory] directive_approval`) -----------------------

PROPOSED_BY = "approval"  # `archived_by` of a proposed row that waits: kept out of the files and recall
WAITING = "waiting for the owner's approval"


def memory_propose(*, op: str, agent_id: str, owner_id: str, scope_type: str, scope_id: str, key: str = "",
                   value: str = "", category: str = "", memory_id: int | None = None, reason: str = "",
                   actor_type: str, actor_id: str = "", run_id: int | None = None,
                   source: MemorySource | None = None, message_ids: list[int] | None = None) -> Memory:
    """Record a change that waits for the owner instead of making it: `add` (by key), `replace` or
    `archive` (by id). A new row waits archived, so nothing renders or recalls it; a live row keeps its
    value, and the proposal, until the owner decides (`memory_decide`). A second proposal for the same
    row takes the place of the first. Each proposal is a `propose` event of the row's history."""
    with transaction.atomic():
        if op == "add":
            value = validate_value(value)
            memory = memory_by_key(agent_id=agent_id, owner_id=owner_id, scope_type=scope_type, scope_id=scope_id,
                                   key=key, lock=True)
            if memory is None or memory.is_archived:
                return _propose_row(memory, agent_id=agent_id, owner_id=owner_id, scope_type=scope_type,
                                    scope_id=scope_id, key=key, value=value, category=category, source=source,
                                    event=dict(actor_type=actor_type, actor_id=actor_id, reason=reason,
                                               run_id=run_id, message_ids=message_ids))
            memory_id, op = memory.id, "replace"  # the key's live row: a change of it
        memory = _locked(memory_id)
        if memory.is_archived:
            raise MemoryRowError("archived", f"memory row {memory_id} is archived; restore it first")
        proposal = {"state": APPROVAL_PENDING, "op": op}
        if op == "replace":
            proposal |= {"value": validate_value(value), "category": category or memory.category}
        else:
            proposal["reason"] = reason
        memory.approval = proposal
        memory.save(update_fields=["approval"])
        _proposal_event(memory, proposal.get("value", memory.value), proposal.get("category", memory.category),
                        actor_type=actor_type, actor_id=actor_id, reason=reason, run_id=run_id,
                        message_ids=message_ids)
        generations.bump(memories_generation(memory.agent_id))
    return memory


def _propose_row(memory: Memory | None, *, agent_id, owner_id, scope_type, scope_id, key, value, category, source,
                 event: dict) -> Memory:
    """A row for a new key, or the key's archived row, waiting archived with the proposed value."""
    now = timezone.now()
    if memory is None:
        memory = Memory(agent_id=agent_id, owner_id=owner_id, scope_type=scope_type, scope_id=scope_id, key=key.strip(),
                        created_at=now, source=source, source_type=source.source_type if source else "",
                        source_name=source.name if source else "")
    before = None if memory.pk is None else _snapshot(memory)
    memory.value, memory.category, memory.promote_target = value, category, promote_target_for(category)
    memory.archived_at, memory.archived_by, memory.archive_reason = now, PROPOSED_BY, WAITING
    memory.approval, memory.updated_at = {"state": APPROVAL_PENDING, "op": "add"}, now
    memory.save()
    _proposal_event(memory, value, category, before=before, **event)
    generations.bump(memories_generation(agent_id))
    return memory


def _proposal_event(memory: Memory, value: str, category: str, *, before: Memory | None = None, actor_type: str,
                    actor_id: str, reason: str, run_id: int | None, message_ids: list[int] | None) -> None:
    shown = before if before is not None else (memory if memory.approval.get("op") != "add" else None)
    MemoryEvent.objects.create(
        memory=memory, action=MemoryEvent.Action.PROPOSE, before_value=shown.value if shown else None,
        after_value=None if memory.approval.get("op") == "archive" else value,
        before_category=shown.category if shown else "", after_category=category, actor_type=actor_type,
        actor_id=str(actor_id)[:200], run_id=run_id,
        reason=(f"{memory.approval['op']} proposed, {WAITING}" + (f": {reason}" if reason else "")),
        message_ids=list(message_ids or []), created_at=timezone.now())


def memory_decide(*, memory_id: int, approve: bool, actor_id: str, reason: str = "") -> Memory:
    """The owner's decision on a pending change: approved, it is made (the row added, corrected or
    archived); rejected, nothing changes (a proposed new row stays archived). Either way an `approve` or
    `reject` event records it and the row's `approval` keeps who decided and when."""
    with transaction.atomic():
        memory = _locked(memory_id)
        pending = memory.pending
        if pending is None:
            raise MemoryRowError("not_pending", f"memory row {memory_id} has no change waiting for approval")
        before, now = _snapshot(memory), timezone.now()
        if approve and pending["op"] == "add":
            memory.archived_at, memory.archived_by, memory.archive_reason = None, "", ""
        elif approve and pending["op"] == "replace":
            memory.value, memory.category = pending["value"], pending["category"]
            memory.promote_target = promote_target_for(memory.category)
        elif approve:
            memory.archived_at, memory.archived_by = now, actor_id[:200]
            memory.archive_reason = pending.get("reason") or "archive approved"
        elif pending["op"] == "add":
            memory.archive_reason = "rejected" + (f": {reason}" if reason else "")
        memory.approval = {**pending, "state": "approved" if approve else "rejected", "by": actor_id[:200],
                           "at": now.isoformat()}
        memory.updated_at = now
        memory.save()
        _event(memory, MemoryEvent.Action.APPROVE if approve else MemoryEvent.Action.REJECT, before=before,
               actor_type="operator", actor_id=actor_id, reason=reason or f"{pending['op']} "
               + ("approved" if approve else "rejected"))
        generations.bump(memories_generation(memory.agent_id))
    return memory


def memory_pending(*, agent_id: str) -> QuerySet[Memory]:
    """The agent's rows with a change waiting for the owner, oldest first."""
    return Memory.objects.filter(agent_id=agent_id, approval__state=APPROVAL_PENDING).order_by("updated_at", "id")


def memory_list(
    *,
    agent_id: str,
    owner_id: str | None = None,
    scope_type: str | None = None,
    scope_id: str | None = None,
    category: str | None = None,
    archived: bool | None = False,
) -> QuerySet[Memory]:
    """Rows of an agent, newest first; live rows only unless `archived` is True (only archived) or None (all)."""
    rows = Memory.objects.filter(agent_id=agent_id)
    for field, value in (("owner_id", owner_id), ("scope_type", scope_type), ("scope_id", scope_id),
                         ("category", category)):
        if value is not None:
            rows = rows.filter(**{field: value})
    if archived is not None:
        rows = rows.filter(archived_at__isnull=not archived)
    return rows.order_by("-updated_at", "-id")


def memory_lookup(*, agent_id: str, owner_id: str, scope_type: str, scope_id: str, key: str) -> Memory | None:
    """One live row by its unique key, through the read-through row cache."""
    def load():
        row = memory_by_key(agent_id=agent_id, owner_id=owner_id, scope_type=scope_type, scope_id=scope_id, key=key)
        return row if row is not None and not row.is_archived else None

    cache_key = ("lookup", agent_id, owner_id, scope_type, scope_id, key)
    return _row_cache.read_through(cache_key, [memories_generation(agent_id)], load)


def memory_get(*, agent_id: str, memory_id: int) -> Memory | None:
    """One row (archived or not) of an agent by id, through the read-through row cache."""
    cache_key = ("id", agent_id, memory_id)
    load = Memory.objects.filter(agent_id=agent_id, pk=memory_id).first
    return _row_cache.read_through(cache_key, [memories_generation(agent_id)], load)


def conversation_source(agent_id: str, key) -> MemorySource:
    """The memory source of a conversation (`key`: a ConversationKey), created on first use."""
    return MemorySource.objects.get_or_create(agent_id=agent_id, key=key.source_key,
                                              defaults={"source_type": "conversation", "name": str(key)})[0]


def memory_history(*, memory_id: int) -> QuerySet[MemoryEvent]:
    """Every change to a row, oldest first; kept when the row is archived."""
    return MemoryEvent.objects.filter(memory_id=memory_id).order_by("id")
