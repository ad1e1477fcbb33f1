"""The nearest stored vectors to a query, exactly, from a per-process cache of each scope's vectors.

A scope is what recall's filters pin: one conversation, one owner, or the whole agent (for memory rows:
one owner or the agent). Its vectors (`embeddings`, under the current model) are read once into this
process as one float16 matrix, then kept current the way the other caches are: rows added since are read
by id on the next search, and any removal (`vectors:<agent>` generation) drops the entry. A search is one
matrix product over the scope; the best candidates are then checked against every filter of the query in
the database, so what semantic recall returns obeys exactly what lexical recall obeys.

Exact search holds a scope's vectors in memory: past MAX_EXACT vectors a scope answers `too_large`
(recall then runs lexically and says so) rather than grow a worker past its memory budget.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
from django.db.models import Exists, OuterRef
from django.utils import timezone

from fermix_site import generations
from memory.models import Embedding, Memory, Message
from memory.search import orm_filters
from memory.search.rank import Scored
from memory.vectors import GRACE, embeddable_messages, vectors_generation

MAX_EXACT = 100_000  # vectors per scope (float16: 77 MB at 384 dimensions)
CANDIDATES = 5  # the nearest limit × CANDIDATES vectors are checked against the filters
MAX_ENTRIES = 256


@dataclass
class _Entry:
    generation: tuple[int, ...]
    ids: np.ndarray  # object ids, in the order of the rows of `matrix`
    matrix: np.ndarray  # float16, one unit vector a row
    last_id: int  # the highest `embeddings.id` read
    top_object: int  # the highest object id read


_cache: dict[tuple, _Entry] = {}
_lock = threading.Lock()


def _scope(kind: str, filters: dict) -> dict:
    """The columns of `embeddings` that pin the scope of `filters` (the exact filters are applied later)."""
    scope = {"agent_id": filters["agent_id"]}
    if kind == Embedding.Kind.MESSAGE and all(isinstance(filters.get(c), str)
                                             for c in ("channel", "chat_id", "thread_scope")):
        scope["conversation"] = f"{filters['channel']}:{filters['chat_id']}:{filters['thread_scope']}"
    elif isinstance(filters.get("owner_id"), str):
        scope["owner_id"] = filters["owner_id"]
    return scope


def _rows(model_id: str, kind: str, scope: dict, after_id: int):
    return (Embedding.objects.filter(model_id=model_id, kind=kind, id__gt=after_id, **scope).order_by("id")
            .values_list("id", "object_id", "vector"))


class TooLarge(Exception):
    """The scope holds more vectors than exact search keeps in memory."""


def _entry(model_id: str, dimensions: int, kind: str, scope: dict) -> _Entry:
    key = (model_id, kind, tuple(sorted(scope.items())))
    generation = generations.current([vectors_generation(scope["agent_id"])])
    with _lock:
        entry = _cache.get(key)
    if entry is None or entry.generation != generation:
        entry = _Entry(generation, np.zeros(0, dtype=np.int64), np.zeros((0, dimensions), dtype=np.float16), 0, 0)
    rows = list(_rows(model_id, kind, scope, entry.last_id)[:MAX_EXACT + 1])
    if rows:
        if len(entry.ids) + len(rows) > MAX_EXACT:
            raise TooLarge(f"{len(entry.ids) + len(rows):,}+ vectors in scope; exact search keeps {MAX_EXACT:,}")
        added = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f2").reshape(-1, dimensions)
        entry = _Entry(generation, np.concatenate([entry.ids, np.fromiter((r[1] for r in rows), dtype=np.int64)]),
                       np.concatenate([entry.matrix, added]), rows[-1][0],
                       max(entry.top_object, max(r[1] for r in rows)))
    with _lock:
        if len(_cache) >= MAX_ENTRIES and key not in _cache:
            _cache.pop(next(iter(_cache)))
        _cache[key] = entry
    return entry


def clear() -> None:
    with _lock:
        _cache.clear()


def incomplete(kind: str, model, filters: dict, entry: _Entry) -> bool:
    """True when rows in scope older than GRACE still wait for their vectors, or the scope has rows but
    no vector at all."""
    old = timezone.now() - GRACE
    if kind == Embedding.Kind.MESSAGE:
        waiting = embeddable_messages().filter(id__gt=entry.top_object, **orm_filters(filters))
        # A scope with no vector yet cannot be searched by meaning at all, however new its rows are.
        return (waiting if not len(entry.ids) else waiting.filter(created_at__lt=old)).exists()
    embedded = Embedding.objects.filter(model_id=model.model_id, kind=kind, object_id=OuterRef("pk"))
    waiting = Memory.objects.filter(**orm_filters(filters)).exclude(Exists(embedded))
    return (waiting if not len(entry.ids) else waiting.filter(updated_at__lt=old)).exists()


@dataclass
class Neighbours:
    hits: list[Scored]
    degraded: str | None = None


def neighbours(kind: str, model, query: str, filters: dict, limit: int) -> Neighbours:
    """The rows nearest in meaning to `query` that pass `filters`, best first (score: the cosine)."""
    try:
        entry = _entry(model.model_id, model.dimensions, kind, _scope(kind, filters))
    except TooLarge:
        return Neighbours([], "too_many_vectors")
    degraded = "embeddings_incomplete" if incomplete(kind, model, filters, entry) else None
    if not len(entry.ids):
        return Neighbours([], degraded)
    vector = model.embed_query(query).astype(np.float32)
    scores = entry.matrix.astype(np.float32) @ vector if len(entry.ids) <= 20_000 else _chunked(entry.matrix, vector)
    wanted = min(len(scores), max(limit * CANDIDATES, limit))
    best = np.argpartition(-scores, wanted - 1)[:wanted]
    best = best[np.argsort(-scores[best], kind="stable")]
    candidates = [int(entry.ids[i]) for i in best]
    model_class = Message if kind == Embedding.Kind.MESSAGE else Memory
    allowed = set(model_class.objects.filter(pk__in=candidates, **orm_filters(filters)).values_list("pk", flat=True))
    by_id = {int(entry.ids[i]): float(scores[i]) for i in best}
    hits = [Scored(i, by_id[i], "") for i in candidates if i in allowed][:limit]
    return Neighbours(hits, degraded)


def _chunked(matrix: np.ndarray, vector: np.ndarray, rows: int = 20_000) -> np.ndarray:
    """The scores of a large matrix a block at a time, so no float32 copy of it all is made."""
    return np.concatenate([matrix[i:i + rows].astype(np.float32) @ vector for i in range(0, len(matrix), rows)])
