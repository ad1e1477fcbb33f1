"""django-q2 tasks of the memory app. Thin: they take ids and call a service."""

from django.db import connection

from memory import fts
from memory.compactor import WINDOW_MOVED, CompactionError, compact
from memory.models import Memory
from memory.prompt_files import prompt_files_rebuild
from memory.reviewer import review_conversation
from memory.search import upkeep
from memory.vectors import embed_pass


def rebuild_prompt_files_all():
    """The periodic rebuild (a schedule defined in code): every agent's USER.md and MEMORY.md."""
    agents = Memory.objects.values_list("agent_id", flat=True).distinct().order_by("agent_id")
    for agent_id in agents:
        prompt_files_rebuild(agent_id=agent_id, mutation_source="scheduler_rebuild", trigger="schedule")


def optimize_search_index():
    """The daily merge of each FTS5 mirror's segments into one (SQLite; PostgreSQL needs none)."""
    return fts.optimize(connection, above=fts.OPTIMIZE_ABOVE_SEGMENTS)


def review_conversation_task(agent_id: str, conversation_key: str):
    """The background review started after a delivered turn (time-gated)."""
    return review_conversation(agent_id=agent_id, conversation=conversation_key, trigger="background")


def compact_conversation_task(agent_id: str, conversation_key: str, context_window: int | None = None):
    """The post-delivery compaction, when the turn's peak prompt tokens crossed the threshold.

    Losing the race to another compaction or a /clear is an outcome, not a failed task: the window it
    meant to compact is gone (the compactor logs it at INFO).
    """
    try:
        return compact(agent_id=agent_id, conversation=conversation_key, reason="post_delivery",
                       context_window=context_window)
    except CompactionError as exc:
        if exc.code != WINDOW_MOVED:
            raise
        return {"compacted": False, "messages": 0, "reason": WINDOW_MOVED}


def embed_pending_task(agent_id: str | None = None):
    """Embed the messages and memory rows that have no vector under the current model yet: one pass of
    at most `vectors.PASS_S`, or nothing when another worker's pass is running."""
    done = embed_pass(agent_id=agent_id)
    if done is None:
        return {"skipped": "another embedding pass holds the lease"}
    return {"messages": done.messages, "memories": done.memories, "batches": done.batches, "more": done.more}


def vector_index_task(agent_id: str | None = None):
    """The pass over the vector caches of the node that runs it (`memory.search.upkeep.run`): its approximate
    indexes built or brought up to date, its files of scopes' vectors written before a removal brought
    current, those no search will read deleted. Each node's heartbeat runs it for itself too."""
    return upkeep.run(agent_id)
