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

import re
from dataclasses import dataclass

from fermix_site.conf import conf
from memory import rows
from memory.conversations import ConversationKey
from memory.models import Category, Memory, MemorySource, ScopeType, Trust

USER_PROFILE = {Category.IDENTITY, Category.PREFERENCE, Category.INTEREST, Category.GOAL}
WRITERS = {"reviewer", "operator", "tool", "job"}

PROPOSED = "propose"  # the action of a change that waits for the owner (`waits_for_owner`)
TRUST_GATE = "trust_gate"
OUT_OF_SCOPE = "out_of_scope"
# What a reviewer's value may not be (`check_value`): each a code recorded with the skipped operation.
QUESTION, ASSISTANT_REFUSAL, ASSISTANT_ANSWER = "question", "assistant_refusal", "assistant_answer"
SELF_INSTRUCTION, INSTRUCTION_NOT_DIRECTIVE, SAYS_NOTHING = "self_instruction", "instruction_not_directive", \
    "says_nothing"


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


_QUESTION = re.compile(r"\?\s*$|^(what|who|whom|whose|where|when|why|how|which)\b.*\b(you|i|me|my|we|do|does|is|"
                       r"are|can|should)\b|^(can|could|would|will|do|did|should|shall) (you|i|we)\b", re.IGNORECASE)
_REFUSAL = re.compile(r"^(i'?m sorry|sorry,|i apologi[sz]e|unfortunately,? i|as an ai|i (can ?not|can't|cannot|am "
                      r"unable|'m unable|am not able|'m not able|won't|will not|don't have|do not have))\b|"
                      r"\b(assistant|you) (refused|declined|could not|couldn't|can ?not|cannot)\b", re.IGNORECASE)
_ANSWER = re.compile(r"^(here (is|are|'s)|here's|sure\b|certainly\b|of course\b|okay,|ok,|the answer is|i (would )?"
                     r"(recommend|suggest)|i think you|you (could|might|can) try)|\b(the )?assistant "
                     r"(said|answered|replied|told|suggested|recommended|explained|gave|wrote|provided|listed)\b",
                     re.IGNORECASE)
_SELF_INSTRUCTION = re.compile(r"^(you|you're|you are|your)\b|\b(remember|note|keep in mind|don't forget|do not "
                               r"forget|make sure) (that |to )?you\b|^(remember|note|don't forget|do not forget) "
                               r"(that|to)\b", re.IGNORECASE)
# "always answer …" instructs; "always drinks tea …" (a verb ending in s) states a habit.
_IMPERATIVE = re.compile(r"^(always|never)\b(?!\s+\w*[^s\W]s\b)|^(please|don't|do not|stop|avoid|answer|reply|respond|"
                         r"use|call me|be|keep|write|speak|ask|tell|remind|make|give|show|send|let me|include|mention|"
                         r"refer to|address me)\b", re.IGNORECASE)
_VAGUE = frozenset("stuff things thing something anything everything it that this them stuffs whatever ok okay yes no "
                   "good nice cool fine great bad misc various etc lots much many some".split())
_LINKING = frozenset("is are am was be likes like loves love has have does do enjoys wants the a an user they he "
                     "she".split())


def check_value(writer: Writer, category: str, value) -> None:
    """A reviewer's value is a declarative fact about the user or their work: never a question, the
    assistant's refusal or one-shot answer, a self-instruction ("remember that you…"), an instruction to
    the assistant outside `directive`, or a couple of words that say nothing.

    The rule is admission's, like the trust gate: the reviewer distils facts from what the user said, and
    these are the ways a model's distillation goes wrong. Tool, operator and job writes are deliberate and
    keep their text as written.
    """
    if writer.kind != "reviewer" or not isinstance(value, str):
        return
    text = value.strip().strip("\"'").strip()
    if _QUESTION.search(text):
        raise AdmissionError(QUESTION, "a question is not a fact; store what the user stated")
    if _REFUSAL.search(text):
        raise AdmissionError(ASSISTANT_REFUSAL, "the assistant's own refusal is not a fact about the user")
    if _ANSWER.search(text):
        raise AdmissionError(ASSISTANT_ANSWER, "the assistant's one-shot answer is not a fact about the user")
    if _SELF_INSTRUCTION.search(text):
        raise AdmissionError(SELF_INSTRUCTION, "write a declarative fact about the user (\"prefers metric units\"), "
                                               "not an instruction to yourself")
    if category != Category.DIRECTIVE and _IMPERATIVE.search(text):
        raise AdmissionError(INSTRUCTION_NOT_DIRECTIVE, "an instruction to the assistant is a directive, not "
                                                        f"{category or 'a note'}")
    found = re.findall(r"[\w'-]+", text.lower())
    if len(found) < 3 and not [w for w in found if w not in _VAGUE and w not in _LINKING]:
        raise AdmissionError(SAYS_NOTHING, f"{text!r} says nothing that can be remembered")


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


def waits_for_owner(writer: Writer, category: str) -> bool:
    """With `[fermix_core.memory] directive_approval` on, every change the reviewer makes to a directive
    (a standing rule of MEMORY.md) waits for the owner, whoever's messages it came from: a rule written
    into a message by anyone is then only a proposal. The operator's own writes (console, API) are
    decisions already; the tools' directives are notes of a conversation and render nowhere."""
    return writer.kind == "reviewer" and category == Category.DIRECTIVE and conf.memory.directive_approval


def _as(writer: Writer, reason: str, message_ids: list[int] | None) -> dict:
    return dict(reason=reason, actor_type=writer.actor_type, actor_id=writer.actor_id, run_id=writer.run_id,
                message_ids=message_ids)


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
    message_ids: list[int] | None = None,
) -> tuple[Memory, str]:
    """Admit and write a row by key. Returns (row, action) as `memory_upsert` does."""
    check_category(writer, category)
    check_value(writer, category, value)
    category = stored_category(writer, category)
    scope_type, scope_id = scope_for(writer, category)
    if confined(writer):
        existing = rows.memory_by_key(agent_id=writer.agent_id, owner_id=writer.owner_id, scope_type=scope_type,
                                      scope_id=scope_id, key=key)
        if existing is not None:  # the write would change this row: the same rule as a change by id
            check_row(writer, existing)
    if waits_for_owner(writer, category):
        return rows.memory_propose(op="add", agent_id=writer.agent_id, owner_id=writer.owner_id,
                                   scope_type=scope_type, scope_id=scope_id, key=key, value=value, category=category,
                                   source=source, **_as(writer, reason, message_ids)), PROPOSED
    return rows.memory_upsert(
        agent_id=writer.agent_id, owner_id=writer.owner_id, scope_type=scope_type, scope_id=scope_id,
        key=key, value=value, category=category, confidence=confidence, source=source,
        actor_type=writer.actor_type, actor_id=writer.actor_id, reason=reason,
        session_id=str(writer.conversation or ""), run_id=writer.run_id,
        source_message_id=source_message_id, message_ids=message_ids,
    )


def admit_replace(writer: Writer, *, memory_id: int, value: str, category: str | None = None,
                  reason: str = "", message_ids: list[int] | None = None) -> Memory:
    """Admit and apply a correction of an existing row by id (the 200-character limit applies)."""
    memory = Memory.objects.filter(pk=memory_id).first()
    if memory is None:
        raise AdmissionError(rows.NOT_FOUND, f"memory row {memory_id} does not exist")
    check_row(writer, memory)
    check_value(writer, category or memory.category, value)
    if category is not None:
        check_category(writer, category)
        category = stored_category(writer, category) or None  # a confined writer's note stays a note
    if category is not None and category != memory.category:
        if scope_for(writer, category) != scope_for(writer, memory.category or category):
            raise AdmissionError("scope_change", "a replace cannot move a row to another scope; "
                                                 "archive it and add a new one")
    if waits_for_owner(writer, memory.category) or waits_for_owner(writer, category or ""):
        return rows.memory_propose(op="replace", memory_id=memory_id, value=value, category=category or "",
                                   agent_id=writer.agent_id, owner_id=memory.owner_id, scope_type=memory.scope_type,
                                   scope_id=memory.scope_id, **_as(writer, reason, message_ids))
    return rows.memory_replace(memory_id=memory_id, value=value, category=category,
                               actor_type=writer.actor_type, actor_id=writer.actor_id, reason=reason,
                               run_id=writer.run_id, source_message_id=max(message_ids) if message_ids else None,
                               message_ids=message_ids)


def admit_archive(writer: Writer, *, memory_id: int, reason: str = "", message_ids: list[int] | None = None) -> Memory:
    """Admit and archive a row by id (restorable)."""
    memory = Memory.objects.filter(pk=memory_id).first()
    if memory is None:
        raise AdmissionError(rows.NOT_FOUND, f"memory row {memory_id} does not exist")
    check_row(writer, memory)
    if waits_for_owner(writer, memory.category):
        return rows.memory_propose(op="archive", memory_id=memory_id, agent_id=writer.agent_id,
                                   owner_id=memory.owner_id, scope_type=memory.scope_type, scope_id=memory.scope_id,
                                   **_as(writer, reason, message_ids))
    return rows.memory_archive(memory_id=memory_id, archived_by=f"{writer.actor_type}:{writer.actor_id}".rstrip(":"),
                               reason=reason, actor_type=writer.actor_type, actor_id=writer.actor_id,
                               run_id=writer.run_id, message_ids=message_ids)
