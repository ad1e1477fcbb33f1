"""The nearest stored vectors to a query, exactly, from a per-process cache of each scope's vectors.

A scope is what recall's filters pin: one conversation, one owner, or the whole agent (for memory rows:
one owner or the agent). Its vectors (`embeddings`, under the current model) are read once into this
process as one float16 matrix, then kept current the way the other caches are: rows added since are read
by id on the next search, and after any removal (`vectors:<agent>` generation) the entry keeps the rows whose
`embeddings` ids are still in the scope's index (`_without_removed`). A search is one
matrix product over the scope; the best candidates are then checked against every filter of the query in
the database, so what semantic recall returns obeys exactly what lexical recall obeys.

Exact search holds a scope's vectors in memory, up to `[fermix_core.embeddings] exact_max_vectors` of
them. A larger scope (an agent's whole history) is searched through the agent's approximate index
(`memory.search.ann`) and, exactly, the vectors stored since that index was built; its candidates pass
the same filters. While this node has no index yet the answer says `vector_index_building` (and asks
the cluster for one), without usearch installed `vector_index_unavailable`; recall then runs lexically.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from django.db.models import Exists, Min, OuterRef
from django.utils import timezone

from fermix_site import generations
from fermix_site.conf import conf
from memory import embeddings
from memory.models import Embedding, Memory, Message, memories_generation
from memory.search import ann, any_after, orm_filters, passing, vector_files
from memory.search.rank import Scored
from memory.search.vector_files import Stored
from memory.vectors import EMBEDDED_KINDS, GRACE, scope_rows, vectors_generation

logger = logging.getLogger("fermix.memory.semantic")

try:
    import numkong
except ImportError:  # installed with usearch; exact search then scores in numpy
    numkong = None

# A query over several conversations is searched as the query less this share of the scope's mean vector
# (`_centred`): a message near the mean of everything (a word salad, "Congratulations!") lies near many
# questions and is nobody's answer. Tuned on bench/recall_eval.py (docs/recall.md).
CENTRING = 0.3
CANDIDATES = 5  # the nearest limit × CANDIDATES vectors are checked against the filters
PINNED_CANDIDATES = 40  # … × this many for an owner or conversation searched through the agent's index
MAX_ENTRIES = 256
# A scope's scores are computed a part at a time on each core, a part of at least SCORE_PART_ROWS rows: the
# scan is bound by memory and one thread reads about 7 GB/s of the 32 MB of 41,745 rows (4.4 ms; 2.3 ms on
# two threads); below twice that a second thread costs about what it saves (docs/performance.md).
SCORE_PART_ROWS = 5_000
_SCORE_PARTS = max(1, min(os.cpu_count() or 1, 4))
# The parts after the first: each reads its rows and returns, never waiting on anything, so any thread
# may hand parts to it (the embedding pool's included) without waiting on itself.
_score_pool = ThreadPoolExecutor(max_workers=max(1, _SCORE_PARTS - 1), thread_name_prefix="fermix-scores")


# The scopes' files are written on a thread of their own, one at a time: a query goes on with the vectors it
# read (writing the file of 41,745 vectors took 16-113 ms). The thread reads and writes files only, never the
# database.
_file_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fermix-vector-files")

# scope key → (the generation it was read at, its vectors)
_cache: dict[tuple, tuple[tuple[int, ...], Stored]] = {}
# (model, scope filters, the highest embeddings.id read) → when the oldest memory row of the scope still
# waiting for its vector was last changed (None: none waits), at the agent's memories and vectors generations
_waiting = generations.local_cache(max_entries=MAX_ENTRIES)
_too_large: dict[tuple, tuple[int, ...]] = {}  # scope key → the generation at which it was too large
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


def _rows(model_id: str, kind: str, scope: dict, after_id: int, columns=("id", "object_id", "vector")):
    return scope_rows(model_id, kind, scope, after_id).order_by("id").values_list(*columns)


class TooLarge(Exception):
    """The scope holds more vectors than exact search keeps in memory."""


def _entry(model_id: str, dimensions: int, kind: str, scope: dict, after_id: int = 0, top_object: int = 0) -> Stored:
    """The scope's vectors stored after `after_id` (`embeddings.id`; past 0: those an agent's index does not
    hold yet), read once and kept current."""
    limit = conf.embeddings.exact_max_vectors
    key = (model_id, kind, tuple(sorted(scope.items())), after_id)
    generation = generations.current([vectors_generation(scope["agent_id"], kind)])
    with _lock:
        read_at, entry = _cache.get(key, (None, None))
        too_large = _too_large.get(key) == generation
    if too_large or (entry is not None and len(entry.ids) > limit):  # (the limit may have been lowered)
        raise TooLarge(f"more than {limit:,} vectors in scope")
    keep_file = False
    if entry is not None and read_at != generation:  # vectors of the agent were removed since
        kept = _without_removed(entry, model_id, kind, scope, after_id)
        # Some were this scope's: its file is written again without them, and held mapped (`_keep_file`).
        keep_file = not after_id and vector_files.FROM_VECTORS <= len(kept.ids) < len(entry.ids)
        entry = kept
    if entry is None:
        entry = _from_file(model_id, dimensions, kind, scope, generation) if not after_id else None
        # Counted by ids alone, so the scope's index answers without reading a vector.
        if entry is None and not after_id and _rows(model_id, kind, scope, 0, ("id",))[:limit + 1].count() > limit:
            with _lock:
                _too_large[key] = generation  # vectors only grow between removals: no need to count again
            raise TooLarge(f"more than {limit:,} vectors in scope")
        empty = np.zeros(0, dtype=np.int64)
        entry = entry or Stored(empty, np.zeros((0, dimensions), dtype=np.float16), after_id, top_object,
                                np.zeros(dimensions, dtype=np.float32), empty)
    # Past `after_id`, an agent's vectors stored after its approximate index, sought by id (embeddings_agent_idx).
    rows = list(_rows(model_id, kind, scope, entry.last_id)[:limit + 1])
    if len(entry.ids) + len(rows) > limit:
        raise TooLarge(f"{len(entry.ids) + len(rows):,}+ vectors in scope; exact search keeps {limit:,}")
    if rows:
        entry = entry.adding(np.fromiter((r[1] for r in rows), dtype=np.int64),
                             np.fromiter((r[0] for r in rows), dtype=np.int64),
                             np.frombuffer(b"".join(r[2] for r in rows), dtype="<f2").reshape(-1, dimensions),
                             rows[-1][0])
        # Each time another FROM_VECTORS have been read, the scope's file is written (`_keep_file`). (One that
        # could not be written is tried again at the next FROM_VECTORS, not at each new vector.)
        every = vector_files.FROM_VECTORS
        keep_file |= not after_id and len(entry.recent) // every > (len(entry.recent) - len(rows)) // every
    with _lock:
        if len(_cache) >= MAX_ENTRIES and key not in _cache:
            _cache.pop(next(iter(_cache)))
        _cache[key] = (generation, entry)
    if keep_file:
        with contextlib.suppress(RuntimeError):  # the process is exiting: the file is a cache, left unwritten
            _file_writer.submit(_keeping_file, key, model_id, kind, scope, generation, entry)
    return entry


def _keeping_file(*args) -> None:
    """`_keep_file` on the writer's thread, where nobody waits for its outcome: what it raises is logged."""
    try:
        _keep_file(*args)
    except Exception:
        logger.exception("the scope's vectors file was not written")


def _keep_file(key: tuple, model_id: str, kind: str, scope: dict, generation: tuple[int, ...], entry: Stored) -> None:
    """Write the scope's file from `entry`, for the node's next processes, and hold the file mapped in its place
    (with what the process has read since): the vectors are then pages the node's processes share, not a copy
    of this one's own. On `_file_writer`, beside the queries: no query waits for a write."""
    with _lock:
        read_at, _ = _cache.get(key, (None, None))
    # A removal this process has seen since: the file would hold what was removed (a later write makes it).
    if read_at != generation or not vector_files.write(model_id, kind, scope, generation, entry):
        return
    mapped = vector_files.read(model_id, kind, scope, generation, entry.dimensions)
    with _lock:
        read_at, held = _cache.get(key, (None, None))
        # Only an entry grown from this one since by vectors added (a removal changes the generation).
        if mapped is None or held is None or read_at != generation or held.matrix is not entry.matrix:
            return
        done, recent = len(entry.ids), 0 if entry.recent is None else len(entry.recent)
        if len(held.ids) > done:
            mapped = mapped.adding(held.ids[done:], held.keys[done:], held.recent[recent:], held.last_id)
        _cache[key] = (generation, mapped)


def wait_for_files() -> None:
    """Return once the scopes' files this process has begun to write are written (and held mapped)."""
    with contextlib.suppress(RuntimeError):  # exiting: nothing more is written
        _file_writer.submit(lambda: None).result()


def _from_file(model_id: str, dimensions: int, kind: str, scope: dict, generation: tuple[int, ...]) -> Stored | None:
    """The scope's vectors as this node's file of them holds them (`memory.search.vector_files`): a file
    written before a removal is brought current first (the rows whose vectors are gone dropped, the file
    written again), so a memory row changed anywhere in the agent does not send the next process to
    the database for the agent's every memory row's vector."""
    stored = vector_files.read(model_id, kind, scope, generation, dimensions)
    if stored is not None and stored.stale:
        stored = vector_files.current(model_id, kind, scope, generation, stored)
    return stored if stored is not None and len(stored.ids) else None


def _without_removed(entry: Stored, model_id: str, kind: str, scope: dict, after_id: int) -> Stored:
    """`entry` without the rows whose vectors were removed since it was read, found by the scope's
    `embeddings` ids up to the last it read, which the scope's index alone holds (no vector is read again:
    `vector_files.still_held`). Any removal bumps the generation of every scope of the agent's vectors of
    that kind, and a changed memory row is one: reading the scope again after each took 0.8-1.0 s for an
    agent's 29,588 memory rows at a million messages on SQLite."""
    return vector_files.without(entry, vector_files.still_held(model_id, kind, scope, entry.keys, after_id))


@generations.also_clear
def clear() -> None:
    wait_for_files()  # none lands after: it would be held, or written under another configuration's home
    with _lock:
        _cache.clear()
        _too_large.clear()
    ann.clear()


def incomplete(kind: str, model, filters: dict, top_object: int, has_vectors: bool, last_id: int = 0,
               held: np.ndarray | None = None) -> bool:
    """True when rows in scope older than GRACE still wait for their vectors, or the scope has rows but
    no vector at all (`top_object`: the highest object id with a vector; `last_id`: the highest
    `embeddings.id` read; `held`: the object ids of the scope's vectors up to `last_id`, all of them,
    when the caller holds them)."""
    old = timezone.now() - GRACE
    if kind == Embedding.Kind.MESSAGE:
        # A scope with no vector yet cannot be searched by meaning at all, however new its rows are.
        waiting = {**filters, "kind": list(EMBEDDED_KINDS), **({"created_at__lt": old} if has_vectors else {})}
        if "created_at__lt" in filters and has_vectors:
            waiting["created_at__lt"] = min(old, filters["created_at__lt"])
        return any_after(Message._meta.db_table, top_object, waiting)
    # Memory rows: an anti-join over the scope's live rows, so its answer (when the oldest row waiting was
    # changed) is kept until a row or a vector of the agent changes, or a vector is added (`last_id`).
    agent_id = filters["agent_id"]
    key = (model.model_id, kind, tuple(sorted((k, repr(v)) for k, v in filters.items())), last_id)
    names = [memories_generation(agent_id), vectors_generation(agent_id, kind)]

    def oldest_waiting():
        if held is not None and _whole_agent(filters):
            counted = _oldest_waiting_counted(filters, held, old)
            if counted is not UNKNOWN:
                return counted
        embedded = Embedding.objects.filter(model_id=model.model_id, kind=kind, object_id=OuterRef("pk"))
        waiting = Memory.objects.filter(**orm_filters(filters)).exclude(Exists(embedded))
        return waiting.aggregate(oldest=Min("updated_at"))["oldest"]

    oldest = _waiting.read_through(key, names, oldest_waiting)
    return oldest is not None and (not has_vectors or oldest < old)


UNKNOWN = object()


def _whole_agent(filters: dict) -> bool:
    """Whether memory-row `filters` select exactly the rows whose vectors make the agent's scope: its live rows."""
    return filters.keys() == {"agent_id", "archived_at__isnull"} and filters["archived_at__isnull"] is True


def _oldest_waiting_counted(filters: dict, held: np.ndarray, old) -> object:
    """When the oldest of an agent's live memory rows still waiting for its vector was last changed (None:
    none waits), by counting, or UNKNOWN. Each live row has at most one vector under a model and a row
    loses it in the transaction that changes or archives it (`memory.rows`, erasure), so `held` (the
    object ids of the agent's vectors) are live rows: when the rows changed before `old` number as many as
    the vectors held for them, none of those waits, and the oldest waiting row is among the few changed
    since, read with their ids. Else UNKNOWN, and the caller asks the anti-join. Two statements over
    the index of live rows instead of the anti-join's probe of `embeddings` for each row: the anti-join
    is what every memory change made the next memory recall over all conversations pay."""
    rows = Memory.objects.filter(**orm_filters(filters))
    total = rows.count()
    recent = list(rows.filter(updated_at__gte=old).values_list("id", "updated_at"))
    ids = np.fromiter((pk for pk, _ in recent), dtype=np.int64, count=len(recent))
    with_vector = np.isin(ids, held)
    if total - len(recent) != len(held) - int(with_vector.sum()):
        return UNKNOWN
    return min((at for (_, at), has in zip(recent, with_vector.tolist(), strict=True) if not has), default=None)


def _degraded(kind: str, model, filter_sets: list[dict], top_object: int, has_vectors: bool,
              last_id: int, held: np.ndarray | None = None) -> list[str | None]:
    """`embeddings_incomplete` for each set whose rows still wait for their vectors (`incomplete`), else None.
    The sets before the last narrow it, so a row waiting in one of them waits in the last too: they are
    asked only when the last is incomplete. Memory rows are asked by an anti-join over the scope's live rows
    (for the whole agent's live rows, counted against `held`, the scope's vectors' object ids, first),
    kept per set of filters; a time span is a new set at almost every query, and its anti-join over a whole
    agent's memory rows took 20–65 ms at a million messages on PostgreSQL, at every dated question."""
    widest = incomplete(kind, model, filter_sets[-1], top_object, has_vectors, last_id, held)
    return ["embeddings_incomplete" if widest and (filters is filter_sets[-1] or incomplete(
        kind, model, filters, top_object, has_vectors, last_id)) else None for filters in filter_sets]


@dataclass
class Neighbours:
    hits: list[Scored]
    degraded: str | None = None


def _past_exact(model, kind: str, scope: dict) -> bool:
    """Whether `scope` is a whole agent whose index on this node already holds more vectors than exact
    search keeps: it is searched through the index without first counting its vectors (a count of 100,000
    ids from a cold disk took 400 ms, in each new process)."""
    if len(scope) > 1:
        return False
    index = ann.opened(model.model_id, kind, scope["agent_id"])
    return index is not None and index.meta.count > conf.embeddings.exact_max_vectors


def neighbours(kind: str, model, query: str, filters: dict, limit: int) -> Neighbours:
    """The rows nearest in meaning to `query` that pass `filters`, best first (score: the cosine)."""
    return neighbours_each(kind, model, query, [filters], limit)[0]


def neighbours_each(kind: str, model, query: str, filter_sets: list[dict], limit: int) -> list[Neighbours]:
    """`neighbours` for each of `filter_sets`, which pin the same scope and differ in what else they filter:
    each set before the last narrows the last (a time span within the rest). The scope's nearest candidates
    are found once, and each set takes those that pass it. (Both a span's and the rest's were the scope's
    same nearest candidates, found twice.)"""
    return start(kind, model, query, filter_sets, limit)()


def start(kind: str, model, query: str, filter_sets: list[dict], limit: int,
          pool: Executor | None = None) -> Callable[[], list[Neighbours]]:
    """`neighbours_each`, begun: the scope's vectors are read now, and with a `pool` the scope's scores
    are computed there as soon as the query's vector is, while the caller goes on (recall runs its
    lexical passes); the function returned waits for them and filters the candidates. Scoring a
    conversation of 41,745 messages took 4.65 ms, after passes that had taken 5–11 ms
    (docs/performance.md). Past exact search the index is searched when the function is called."""
    scope = _scope(kind, filter_sets[0])
    if any(_scope(kind, filters) != scope for filters in filter_sets):
        raise ValueError("the filter sets pin different scopes")
    # Messages of an owner or of the whole agent: several conversations (see `_centred`).
    centred = kind == Embedding.Kind.MESSAGE and "conversation" not in scope
    if _past_exact(model, kind, scope):
        return lambda: _approximate(kind, model, query, filter_sets, pinned=False, centred=centred, limit=limit)
    try:
        entry = _entry(model.model_id, model.dimensions, kind, scope)
    except TooLarge:
        return lambda: _approximate(kind, model, query, filter_sets, pinned=len(scope) > 1, centred=centred,
                                    limit=limit)
    degraded = _degraded(kind, model, filter_sets, entry.top_object, len(entry.ids) > 0, entry.last_id,
                         entry.ids)
    if not len(entry.ids):
        return lambda: [Neighbours([], why) for why in degraded]

    def best() -> list[tuple[int, float]]:  # no database here: it may run on the pool
        vector = model.embed_query(query).astype(np.float32)
        if centred:
            vector = _centred(vector, entry.total, len(entry.ids))
        return _best(entry, vector, max(limit * CANDIDATES, limit))

    scored = pool.submit(best) if pool is not None else None

    def finish() -> list[Neighbours]:
        found = scored.result() if scored is not None else best()
        return [Neighbours(_passing(kind, found, filters, limit), why)
                for filters, why in zip(filter_sets, degraded, strict=True)]

    return finish


def _centred(vector: np.ndarray, total: np.ndarray, count: int) -> np.ndarray:
    """The query less CENTRING times the mean of the `count` vectors summing to `total`. For unit vectors d,
    d · (q − c·mean) ranks as the cosine does, less c times each vector's nearness to the mean: the
    centring that reduces hubs in nearest-neighbour search (Suzuki et al., 2013). Over one conversation
    the mean is its own subject, and taking it away cost the evaluation's keyword questions there; over an
    owner's or every conversation, the messages near every question (other owners' word salads, "Well
    deserved!") fall behind (docs/recall.md)."""
    if count < 2:
        return vector
    return (vector - CENTRING * (total / count)).astype(np.float32)


def _approximate(kind: str, model, query: str, filter_sets: list[dict], *, pinned: bool, centred: bool,
                 limit: int) -> list[Neighbours]:
    """A scope past exact search's limit: the agent's index, and exactly the vectors stored since it was
    built. An owner or conversation (`pinned`) takes more of the index's candidates, since most are others'.
    `centred`: searched centred on the mean of the agent's vectors (the index's, when it records it)."""
    agent_id = filter_sets[0]["agent_id"]
    if not ann.available():
        return [Neighbours([], "vector_index_unavailable") for _ in filter_sets]
    index = ann.opened(model.model_id, kind, agent_id)
    if index is None:
        ann.queue_refresh(agent_id)
        return [Neighbours([], "vector_index_building") for _ in filter_sets]
    try:
        recent = _entry(model.model_id, model.dimensions, kind, {"agent_id": agent_id}, index.meta.last_id,
                        index.meta.top_object)
    except TooLarge:  # the index is far behind: it is being extended
        ann.queue_refresh(agent_id)
        return [Neighbours([], "vector_index_building") for _ in filter_sets]
    degraded = _degraded(kind, model, filter_sets, recent.top_object, True, recent.last_id)
    vector = model.embed_query(query).astype(np.float32)
    if centred and index.meta.total is not None:
        vector = _centred(vector, np.asarray(index.meta.total, dtype=np.float32) + recent.total,
                          index.meta.count + len(recent.ids))
    wanted = max(limit * CANDIDATES, limit) * (PINNED_CANDIDATES if pinned else 1)
    found = ann.current_vectors(ann.nearest_keys(index, vector, wanted))
    scores = embeddings.matrix((f[2] for f in found), model.dimensions) @ vector if found else np.zeros(0)
    best = dict(zip((f[1] for f in found), scores.tolist(), strict=True))
    for object_id, score in _best(recent, vector, wanted):
        best[object_id] = max(score, best.get(object_id, -2.0))
    ranked = sorted(best.items(), key=lambda item: -item[1])[:wanted]
    return [Neighbours(_passing(kind, ranked, filters, limit), why) for filters, why in zip(filter_sets, degraded,
                                                                                            strict=True)]


def _best(entry: Stored, vector: np.ndarray, wanted: int) -> list[tuple[int, float]]:
    """The `wanted` nearest (object id, cosine) of an entry, best first."""
    if not len(entry.ids):
        return []
    blocks = entry.blocks
    scores = _scores(blocks[0], vector) if len(blocks) == 1 else np.concatenate([_scores(b, vector) for b in blocks])
    wanted = min(len(scores), wanted)
    best = np.argpartition(-scores, wanted - 1)[:wanted]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [(int(entry.ids[i]), float(scores[i])) for i in best]


def _scores(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Each float16 row's dot product with `vector`, in float32. numkong multiplies the float16 values with
    the CPU's SIMD and sums in float32, without a float32 copy of the matrix, and outside Python's lock: 2.2
    ms for the 41,745 rows of the largest conversation at a million messages on one core of an Intel Xeon,
    where usearch's exact search took 6.1 ms and a float32 copy 22 ms. A large matrix is scored in parts,
    one on this thread and the others on `_score_pool` (`SCORE_PART_ROWS`). Without numkong (it comes with
    usearch), block by block in float32."""
    if numkong is None:
        return matrix.astype(np.float32) @ vector if len(matrix) <= 20_000 else _chunked(matrix, vector)
    query = np.asarray(vector, dtype=np.float16)[None, :]
    parts = max(1, min(_SCORE_PARTS, len(matrix) // SCORE_PART_ROWS))
    if parts == 1:
        return _dot(matrix, query)
    step = -(-len(matrix) // parts)
    later = [_score_pool.submit(_dot, matrix[i:i + step], query) for i in range(step, len(matrix), step)]
    return np.concatenate([_dot(matrix[:step], query), *(part.result() for part in later)])


def _dot(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    return np.asarray(numkong.cdist(matrix, query, metric="dot", out_dtype="float32")).ravel()


def _passing(kind: str, candidates: list[tuple[int, float]], filters: dict, limit: int) -> list[Scored]:
    """The candidates that pass every filter of the query in the database, best first."""
    table = Message._meta.db_table if kind == Embedding.Kind.MESSAGE else Memory._meta.db_table
    allowed = passing(table, [i for i, _ in candidates], filters)
    return [Scored(i, score, "") for i, score in candidates if i in allowed][:limit]


def _chunked(matrix: np.ndarray, vector: np.ndarray, rows: int = 20_000) -> np.ndarray:
    """The scores of a large matrix a block at a time, so no float32 copy of it all is made."""
    return np.concatenate([matrix[i:i + rows].astype(np.float32) @ vector for i in range(0, len(matrix), rows)])
