"""The stored vectors: which rows still need one, embedding them off the request path, forgetting them.

Messages (chat and voice turns) and live memory rows are embedded by the configured model
(`memory.embeddings.embedder()`) and stored in `embeddings` with the model's id and dimension, so every
node shares them. New rows wait for the task `memory.tasks.embed_pending_task`: an append asks for it
after its commit, at most once a second per process (`queue_embedding`), and the schedule
`fermix-embeddings` runs it every minute in case a request was lost; `embeddings_rebuild` runs the same
loop by hand. Each batch is read, embedded with no transaction open, then written in one short transaction
that re-checks each row (a memory row changed or archived meanwhile is left for the next pass).

A message is pending while it has no vector under the current model; messages are embedded in id order,
so the highest embedded id (`watermark`) tells the pending ones from the rest without reading them. A
memory row loses its vector whenever it changes (`forget_memory_vectors`, in the writing transaction), so
a live row without one is pending. Archived, erased and forgotten rows keep no vector.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, Max, OuterRef
from django.utils import timezone

from fermix_site import generations, leases
from fermix_site.enqueue import enqueue_after_commit
from memory import embeddings
from memory.models import Embedding, Memory, Message

logger = logging.getLogger("fermix.memory.vectors")

EMBEDDED_KINDS = ("chat", "voice_turn")
GRACE = timedelta(seconds=60)  # a row this new may wait for its vector without making recall incomplete
BATCH = 64
QUEUE_EVERY_S = 1.0
PASS_S = 45.0  # one task's embedding time, under the schedule's minute
LEASE = "embeddings"
LEASE_TTL = timedelta(minutes=5)  # renewed before each batch; frees a dead worker's lease
Kind = Embedding.Kind

_queued_at = 0.0
_queue_lock = threading.Lock()


def vectors_generation(agent_id: str, kind: str) -> str:
    """Bumped whenever vectors of this kind of an agent are removed (the caches of such vectors drop what
    they hold): a changed memory row leaves the cached message vectors alone."""
    return f"vectors:{agent_id}:{kind}"


def scope_rows(model_id: str, kind: str, scope: dict, after_id: int = 0):
    """A scope's rows of `embeddings` under the model (`scope`: the agent, and a conversation or an owner),
    those stored after `after_id`: what exact search holds, an approximate index is built of, a node's file
    of a scope keeps."""
    return Embedding.objects.filter(model_id=model_id, kind=kind, id__gt=after_id, **scope)


def embeddable_messages():
    return Message.objects.filter(kind__in=EMBEDDED_KINDS)


def watermark(model_id: str, kind: str = Kind.MESSAGE, **scope) -> int:
    """The highest object id embedded under the model (in the scope's columns of `embeddings`), or 0."""
    return scope_rows(model_id, kind, scope).aggregate(top=Max("object_id"))["top"] or 0


def pending_messages(model_id: str, agent_id: str | None = None, limit: int = BATCH) -> list[Message]:
    scope = {"agent_id": agent_id} if agent_id else {}
    rows = embeddable_messages().filter(id__gt=watermark(model_id, **scope), **scope).order_by("id")
    return list(rows.only("id", "agent_id", "owner_id", "channel", "chat_id", "thread_scope", "role", "sender",
                          "content", "created_at")[:limit])


def _embedded(model_id: str, kind: str):
    return Embedding.objects.filter(model_id=model_id, kind=kind, object_id=OuterRef("pk"))


def pending_memories(model_id: str, agent_id: str | None = None, limit: int = BATCH) -> list[Memory]:
    rows = Memory.objects.filter(archived_at__isnull=True).exclude(Exists(_embedded(model_id, Kind.MEMORY)))
    if agent_id:
        rows = rows.filter(agent_id=agent_id)
    return list(rows.order_by("id").only("id", "agent_id", "owner_id", "key", "value", "updated_at")[:limit])


def _write(model_id: str, dimensions: int, kind: str, rows: list, vectors) -> int:
    """Store one batch in one short transaction; a memory row that changed since it was read is skipped."""
    now = timezone.now()
    with transaction.atomic():
        if kind == Kind.MEMORY:
            current = dict(Memory.objects.filter(pk__in=[r.pk for r in rows], archived_at__isnull=True)
                           .values_list("pk", "value"))
            keep = [i for i, r in enumerate(rows) if current.get(r.pk) == r.value]
        else:
            keep = list(range(len(rows)))
        objects = [Embedding(kind=kind, object_id=rows[i].pk, agent_id=rows[i].agent_id, owner_id=rows[i].owner_id,
                             conversation=rows[i].conversation_key if kind == Kind.MESSAGE else "",
                             model_id=model_id, dimensions=dimensions, vector=embeddings.to_bytes(vectors[i]),
                             created_at=rows[i].created_at if kind == Kind.MESSAGE else now)
                   for i in keep]
        Embedding.objects.bulk_create(objects, ignore_conflicts=True)
    return len(objects)


@dataclass
class Progress:
    messages: int = 0
    memories: int = 0
    batches: int = 0
    more: bool = False  # stopped with rows still pending


def embed_pass(*, agent_id: str | None = None, seconds: float = PASS_S) -> Progress | None:
    """One worker's embedding pass: under the `embeddings` lease (None when another process holds it,
    so concurrent passes never embed the same rows twice) and for at most `seconds`, so a backlog (a
    model change, a backfill) never holds every worker and reviews keep their turn; what is left is
    queued as the next pass."""
    token = leases.acquire(LEASE, LEASE_TTL)
    if token is None:
        return None
    deadline = time.monotonic() + seconds
    try:
        done = embed_pending(agent_id=agent_id, go_on=lambda: time.monotonic() < deadline
                             and leases.renew(LEASE, token, LEASE_TTL))
    finally:
        leases.release(LEASE, token)
    if done.more:
        queue_embedding(now=True)
    return done


def hold_embedding_lease(wait: Callable[[], None]) -> str:
    """The `embeddings` lease for a long pass by hand (`embeddings_rebuild`), waiting (calling `wait`
    between tries) while a worker's pass holds it: at most `PASS_S`."""
    while (token := leases.acquire(LEASE, LEASE_TTL)) is None:
        wait()
    return token


def embed_pending(*, agent_id: str | None = None, batch: int = BATCH, max_batches: int | None = None,
                  progress: Callable[[Progress], None] | None = None,
                  go_on: Callable[[], bool] | None = None) -> Progress:
    """Embed what is pending, a batch at a time, until nothing is (or `max_batches`, or `go_on()` says
    stop before a batch; `done.more` then says work is left); resumable at any point, since what is
    stored is never embedded again. Nothing happens with backend `none`."""
    model = embeddings.embedder()
    done = Progress()
    if model is None:
        return done
    for kind, pending, text in ((Kind.MESSAGE, pending_messages, embeddings.message_text),
                                (Kind.MEMORY, pending_memories, lambda r: embeddings.memory_text(r.key, r.value))):
        while max_batches is None or done.batches < max_batches:
            rows = pending(model.model_id, agent_id, batch)
            if not rows:
                break
            if go_on is not None and not go_on():
                done.more = True
                return done
            vectors = model.embed_documents([text(row) for row in rows])  # no transaction is open here
            written = _write(model.model_id, model.dimensions, kind, rows, vectors)
            done.batches += 1
            if kind == Kind.MESSAGE:
                done.messages += written
            else:
                done.memories += written
            if progress:
                progress(done)
            if kind == Kind.MEMORY and written == 0:
                break  # every row of the batch changed meanwhile: the next pass takes them again
    return done


def queue_embedding(*, now: bool = False) -> None:
    """Ask the cluster for an embedding pass after this transaction commits, at most once a second per
    process (the pass takes whatever is pending, so one request serves every append since the last);
    `now`: whatever the last request was (a pass that stopped with work left)."""
    global _queued_at
    if embeddings_backend_off():
        return
    with _queue_lock:
        at = time.monotonic()
        if not now and at - _queued_at < QUEUE_EVERY_S:
            return
        _queued_at = at
    enqueue_after_commit("memory.tasks.embed_pending_task", keep=False, task_name="embed pending",
                         group="embeddings")


def embeddings_backend_off() -> bool:
    return embeddings.embedder() is None


def forget_memory_vectors(memory_ids, agent_id: str) -> None:
    """Drop the vectors of memory rows (call in the transaction that changes or archives them)."""
    if Embedding.objects.filter(kind=Kind.MEMORY, object_id__in=list(memory_ids)).delete()[0]:
        generations.bump(vectors_generation(agent_id, Kind.MEMORY))


def forget_message_vectors(queryset, agent_id: str) -> int:
    """Drop the vectors of the messages `queryset` selects (erasure), and ask for the agent's approximate
    index to be rebuilt without them after the commit (`memory.search.ann`)."""
    deleted = Embedding.objects.filter(kind=Kind.MESSAGE, object_id__in=queryset.values("pk")).delete()[0]
    if deleted:
        generations.bump(vectors_generation(agent_id, Kind.MESSAGE))
        enqueue_after_commit("memory.tasks.vector_index_task", agent_id, keep=False, task_name="vector index",
                             group="embeddings")
    return deleted


def prune_other_models(model_id: str) -> int:
    """Drop the vectors of every model but `model_id` (after a rebuild under a new model completed)."""
    return Embedding.objects.exclude(model_id=model_id).delete()[0]


def coverage() -> list[dict]:
    """Per model: how many messages and live memory rows have a vector, of how many."""
    messages, memories = embeddable_messages().count(), Memory.objects.filter(archived_at__isnull=True).count()
    current = embeddings.embedder()
    models = set(Embedding.objects.values_list("model_id", flat=True).distinct())
    if current is not None:
        models.add(current.model_id)
    out = []
    for model_id in sorted(models):
        counts = {kind: Embedding.objects.filter(model_id=model_id, kind=kind).count() for kind in Kind.values}
        out.append({"model_id": model_id, "current": current is not None and model_id == current.model_id,
                    "messages": counts[Kind.MESSAGE], "messages_total": messages,
                    "memories": counts[Kind.MEMORY], "memories_total": memories})
    return out


def pending_counts(model_id: str, agent_id: str | None = None, older_than: timedelta | None = None) -> tuple[int, int]:
    """How many messages and live memory rows wait for a vector under the model (`older_than`: only those
    written that long ago or more: the task has not caught up with them)."""
    scope = {"agent_id": agent_id} if agent_id else {}
    messages = embeddable_messages().filter(id__gt=watermark(model_id, **scope), **scope)
    memories = (Memory.objects.filter(archived_at__isnull=True, **scope)
                .exclude(Exists(_embedded(model_id, Kind.MEMORY))))
    if older_than is not None:
        before = timezone.now() - older_than
        messages, memories = messages.filter(created_at__lt=before), memories.filter(updated_at__lt=before)
    return messages.count(), memories.count()
