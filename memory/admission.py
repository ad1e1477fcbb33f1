"""Admission: the one gate every memory write passes, whoever the writer is.

It validates the category, applies the trust gate (a guest never writes a `directive`), and maps the
category and the writer to a scope:

| writer | identity, preference, interest, goal | context | directive | no category (a note) |
|---|---|---|---|---|
| reviewer, operator | owner scope | agent scope | agent scope | refused |
| memory_store tool, operator trust | owner scope | conversation scope | conversation scope | conversation scope |
| memory_store tool, guest trust | conversation note | conversation note | refused | conversation note |
| scheduled job run | job scope | job scope | job scope | job scope |

Conversation-scoped `context` and user-profile rows render into the prompt files; notes,
conversation-scoped `directive` and every job-scoped row never render (see `memory.prompt_files`).

A tool call with guest trust is *confined* (CONTRACT §8 Trust): whoever prompts the model in a group
chat, or holds a bot's channel key, must not reach the owner's memory. It stores only notes of its
conversation (the category it asked for is dropped), and by id or by key it changes only those notes:
a row outside the conversation is `out_of_scope`, a row with a category inside it is the operator's
(`trust_gate`). So nothing a guest sends ever changes what USER.md or MEMORY.md render.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory import rows
from memory.conversations import ConversationKey
from memory.models import Category, Memory, MemorySource, ScopeType, Trust

USER_PROFILE = {Category.IDENTITY, Category.PREFERENCE, Category.INTEREST, Category.GOAL}
WRITERS = {"reviewer", "operator", "tool", "job"}

TRUST_GATE = "trust_gate"
OUT_OF_SCOPE = "out_of_scope"


class AdmissionError(rows.MemoryRowError):
    """A write refused by admission; `code` is the reason recorded with a skipped operation."""


@dataclass(frozen=True)
class Writer:
    """Who is writing, on whose behalf, from where."""

    kind: str  # reviewer, operator, tool, job
    agent_id: str
    owner_id: str
    trust: str = Trust.GUEST
    conversation: ConversationKey | None = None
    job_source_key: str = ""  # `job:<id>` for scheduled job runs
    actor_id: str = ""  # review run id, tool name, operator name, job run id
    run_id: int | None = None  # the review run writing, for the rows' and events' `run`

    @property
    def actor_type(self) -> str:
        return {"reviewer": "reviewer", "operator": "operator", "tool": "tool", "job": "job"}[self.kind]


def confined(writer: Writer) -> bool:
    """A tool call with guest trust: it may touch only its own conversation's notes."""
    return writer.kind == "tool" and writer.trust != Trust.OPERATOR


def stored_category(writer: Writer, category: str) -> str:
    """The category a row is written with: a confined writer's facts are notes, whatever it asked for."""
    return "" if confined(writer) else category


def scope_for(writer: Writer, category: str) -> tuple[str, str]:
    """The (scope_type, scope_id) a writer's row of this category is stored at."""
    if writer.kind == "job":
        if not writer.job_source_key:
            raise AdmissionError("invalid_scope", "a job run writes only with its job's memory source")
        return ScopeType.JOB, writer.job_source_key
    if category in USER_PROFILE:
        return ScopeType.OWNER, writer.owner_id
    if writer.kind == "tool":
        if writer.conversation is None:
            raise AdmissionError("invalid_scope", "memory_store needs a conversation")
        return ScopeType.CONVERSATION, str(writer.conversation)
    if not category:
        raise AdmissionError("invalid_category", "a long-term memory row needs a category")
    return ScopeType.AGENT, writer.agent_id


def check_category(writer: Writer, category: str) -> None:
    """Category validation and the trust gate."""
    if writer.kind not in WRITERS:
        raise AdmissionError("invalid_writer", f"unknown writer {writer.kind!r}")
    if category and category not in Category.values:
        raise AdmissionError("invalid_category",
                             f"category must be one of {', '.join(Category.values)}, got {category!r}")
    if category == Category.DIRECTIVE and writer.trust != Trust.OPERATOR:
        raise AdmissionError(TRUST_GATE, "only the operator may set a directive (a standing rule); "
                                         "store it as context or ask the operator")


def check_row(writer: Writer, memory: Memory) -> None:
    """May this writer change this existing row? (replace, archive by id)"""
    if memory.agent_id != writer.agent_id:
        raise AdmissionError(rows.NOT_FOUND, f"memory row {memory.pk} does not exist")
    if writer.kind == "job" and (memory.scope_type != ScopeType.JOB or memory.scope_id != writer.job_source_key):
        raise AdmissionError(OUT_OF_SCOPE, f"memory row {memory.pk} is not this job's")
    if writer.kind in {"reviewer", "tool"} and memory.owner_id != writer.owner_id:
        raise AdmissionError(OUT_OF_SCOPE, f"memory row {memory.pk} belongs to another owner")
    if confined(writer):
        _check_conversation_note(writer, memory)
    if memory.category == Category.DIRECTIVE and writer.trust != Trust.OPERATOR:
        raise AdmissionError(TRUST_GATE, "only the operator may change a directive")


def _check_conversation_note(writer: Writer, memory: Memory) -> None:
    """A confined writer changes only the notes of its own conversation."""
    here = writer.conversation is not None and (memory.scope_type, memory.scope_id) == (
        ScopeType.CONVERSATION, str(writer.conversation))
    if not here:
        raise AdmissionError(OUT_OF_SCOPE, f"memory row {memory.pk} is outside this conversation; with guest trust "
                                           "only this conversation's notes may be changed")
    if memory.category:
        raise AdmissionError(TRUST_GATE, f"memory row {memory.pk} is long-term memory ({memory.category}); only "
                                         "the operator may change it")


def admit_add(
    writer: Writer,
    *,
    key: str,
    value: str,
    category: str = "",
    confidence: float = 1.0,
    source: MemorySource | None = None,
    reason: str = "",
    source_message_id: int | None = None,
) -> tuple[Memory, str]:
    """Admit and write a row by key. Returns (row, action) as `memory_upsert` does."""
    check_category(writer, category)
    category = stored_category(writer, category)
    scope_type, scope_id = scope_for(writer, category)
    if confined(writer):
        existing = rows.memory_by_key(agent_id=writer.agent_id, owner_id=writer.owner_id, scope_type=scope_type,
                                      scope_id=scope_id, key=key)
        if existing is not None:  # the write would change this row: the same rule as a change by id
            check_row(writer, existing)
    return rows.memory_upsert(
        agent_id=writer.agent_id, owner_id=writer.owner_id, scope_type=scope_type, scope_id=scope_id,
        key=key, value=value, category=category, confidence=confidence, source=source,
        actor_type=writer.actor_type, actor_id=writer.actor_id, reason=reason,
        session_id=str(writer.conversation or ""), run_id=writer.run_id,
        source_message_id=source_message_id,
    )


def admit_replace(writer: Writer, *, memory_id: int, value: str, category: str | None = None,
                  reason: str = "") -> Memory:
    """Admit and apply a correction of an existing row by id (the 200-character limit applies)."""
    memory = Memory.objects.filter(pk=memory_id).first()
    if memory is None:
        raise AdmissionError(rows.NOT_FOUND, f"memory row {memory_id} does not exist")
    check_row(writer, memory)
    if category is not None:
        check_category(writer, category)
        category = stored_category(writer, category) or None  # a confined writer's note stays a note
    if category is not None and category != memory.category:
        if scope_for(writer, category) != scope_for(writer, memory.category or category):
            raise AdmissionError("scope_change", "a replace cannot move a row to another scope; "
                                                 "archive it and add a new one")
    return rows.memory_replace(memory_id=memory_id, value=value, category=category,
                               actor_type=writer.actor_type, actor_id=writer.actor_id, reason=reason,
                               run_id=writer.run_id)


def admit_archive(writer: Writer, *, memory_id: int, reason: str = "") -> Memory:
    """Admit and archive a row by id (restorable)."""
    memory = Memory.objects.filter(pk=memory_id).first()
    if memory is None:
        raise AdmissionError(rows.NOT_FOUND, f"memory row {memory_id} does not exist")
    check_row(writer, memory)
    return rows.memory_archive(memory_id=memory_id, archived_by=f"{writer.actor_type}:{writer.actor_id}".rstrip(":"),
                               reason=reason, actor_type=writer.actor_type, actor_id=writer.actor_id,
                               run_id=writer.run_id)
