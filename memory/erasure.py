"""Erasure of an owner: every message and memory row gone, past revisions redacted to tombstones.

What goes: the owner's messages (their FTS entries go with them, through the delete triggers), memory
rows with their histories, conversations, the reviewer's runs, operations and cursors for those
conversations, and conversation memory sources. What is redacted: every past revision of USER.md and
MEMORY.md that held the owner's content (all of them when the owner is the agent's owner, whose rows are
the only ones rendered) and the checkpoints of the owner's conversations. A redacted revision keeps its
number, hash, size and provenance, so the chain stays gap-free and auditable, and its content becomes a
tombstone. The prompt files are then re-rendered and every process's caches see it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from fermix_site import generations
from fermix_site.conf import conf, valid_id
from memory.conversations import ConversationKey
from memory.conversations import generation_name as conversation_generation
from memory.models import Conversation, Memory, MemorySource, Message, ReviewRun, ReviewState, memories_generation
from memory.prompt_files import prompt_files_rebuild
from memory.vectors import forget_memory_vectors, forget_message_vectors
from resources.models import ResourceRevision
from resources.services import prompt_generation


class ErasureError(ValueError):
    code = "invalid_owner"


@dataclass
class ErasureReport:
    owner_id: str
    agents: list[str] = field(default_factory=list)
    messages: int = 0
    memories: int = 0
    conversations: int = 0
    review_runs: int = 0
    revisions_redacted: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def tombstone(owner_id: str, when) -> str:
    return f"[redacted: the content of owner {owner_id} was erased on {when:%Y-%m-%d %H:%M} UTC]\n"


def _redact(revisions, owner_id: str, now) -> int:
    return revisions.filter(redacted_at__isnull=True).update(content=tombstone(owner_id, now), redacted_at=now)


def _deleted(queryset, model_name: str) -> int:
    return queryset.delete()[1].get(f"memory.{model_name}", 0)


def _values_in(content: str, values: list[str]) -> bool:
    return any(value and value in content for value in values)


def _redact_derived_files(agent_id: str, owner_id: str, values: list[str], now) -> int:
    revisions = ResourceRevision.objects.filter(agent_id=agent_id, resource_type__in=["user_md", "memory_md"])
    if owner_id == conf.memory.owner_id:
        return _redact(revisions, owner_id, now)
    # Another owner's rows never render; redact any revision that still quotes one of their values.
    hits = [r.pk for r in revisions.filter(redacted_at__isnull=True).only("pk", "content")
            if _values_in(r.content, values)]
    return _redact(ResourceRevision.objects.filter(pk__in=hits), owner_id, now)


def memory_forget_owner(*, owner_id: str, agent_id: str | None = None) -> ErasureReport:
    """Erase an owner (in one agent, or in every agent). Irreversible by design."""
    if not valid_id(owner_id):
        raise ErasureError(f"owner id {owner_id!r} is invalid")
    if agent_id is not None and not valid_id(agent_id):
        raise ErasureError(f"agent id {agent_id!r} is invalid")
    report = ErasureReport(owner_id)
    scope = {"agent_id": agent_id} if agent_id else {}
    now = timezone.now()
    with transaction.atomic():
        conversations = Conversation.objects.filter(owner_id=owner_id, **scope)
        message_agents = Message.objects.filter(owner_id=owner_id, **scope).values_list("agent_id", flat=True)
        memory_agents = Memory.objects.filter(owner_id=owner_id, **scope).values_list("agent_id", flat=True)
        conversation_agents = conversations.values_list("agent_id", flat=True)
        report.agents = sorted(set(message_agents) | set(memory_agents) | set(conversation_agents))
        keys = list(conversations.values_list("agent_id", "key"))
        values = list(Memory.objects.filter(owner_id=owner_id, **scope).values_list("value", flat=True))
        for agent, key in keys:
            report.revisions_redacted += _redact(ResourceRevision.objects.filter(
                agent_id=agent, resource_type="checkpoint", scope_id=key), owner_id, now)
            report.review_runs += _deleted(ReviewRun.objects.filter(agent_id=agent, conversation_key=key), "ReviewRun")
            ReviewState.objects.filter(agent_id=agent, conversation_key=key).delete()
            MemorySource.objects.filter(agent_id=agent, key=ConversationKey.parse(key).source_key).delete()
            # Every message of the owner's conversations, the assistant's replies included, and their vectors.
            said = Message.objects.filter(agent_id=agent, **ConversationKey.parse(key).filter())
            forget_message_vectors(said, agent)
            report.messages += _deleted(said, "Message")
        for agent in report.agents:
            forget_message_vectors(Message.objects.filter(owner_id=owner_id, agent_id=agent), agent)
            memories = Memory.objects.filter(owner_id=owner_id, agent_id=agent)
            forget_memory_vectors(memories.values_list("pk", flat=True), agent)
        report.messages += _deleted(Message.objects.filter(owner_id=owner_id, **scope), "Message")
        report.review_runs += _deleted(ReviewRun.objects.filter(owner_id=owner_id, **scope), "ReviewRun")
        report.memories = _deleted(Memory.objects.filter(owner_id=owner_id, **scope), "Memory")
        report.conversations = conversations.delete()[0]
        for agent in report.agents:
            report.revisions_redacted += _redact_derived_files(agent, owner_id, values, now)
            generations.bump(memories_generation(agent), prompt_generation(agent))
        for agent, key in keys:
            generations.bump(conversation_generation(agent, ConversationKey.parse(key)))
    for agent in report.agents:
        prompt_files_rebuild(agent_id=agent, trigger=f"erasure of owner {owner_id}")
    return report
