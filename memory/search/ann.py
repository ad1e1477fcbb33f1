"""An approximate nearest-neighbour index of an agent's vectors, for scopes too large for exact search.

One index per agent, kind (message or memory row) and embedding model, built with usearch (HNSW,
vectors quantised to int8, cosine) from the vectors stored in `embeddings`, when that agent holds more
than `[fermix_core.embeddings] exact_max_vectors` of them. It is a cache, never a source of truth: a file
under `$FERMIX_HOME/cache/vectors/<agent>/` beside a small JSON file (`meta`) saying what it holds, rebuilt
from the database whenever it is missing, unreadable or out of date, so it may be deleted at any time.

- The keys are `embeddings.id`, not object ids: a key found in the index is current only while its row
  in `embeddings` still exists (a memory row that changed got a new one, an erased row has none), and
  every candidate is checked there (`current_vectors`) and scored again exactly from the stored vector.
- The index holds the vectors up to `meta.last_id`; those stored since are searched exactly beside it
  (`memory.search.semantic`), and `refresh` folds them in once there are FOLD_EVERY of them.
- `refresh` builds the index anew when vectors it holds were removed (erasure, a model change), so what
  was erased leaves the file with the next pass: erasure asks for one at once (`memory.vectors`).
- Processes search the file memory-mapped (usearch `view`): the pages are the operating system's, shared
  by every process of the node, and a rebuilt file (written beside, then renamed over) is seen by its
  inode and size at the next search. Each node keeps its own file, built by its own cluster's schedule
  (`fermix-vector-index`) or `manage.py vector_index_rebuild`.
- An index is built and written only where it fits on its disk above `[fermix_core.storage] min_free_mb`
  (else `no_room`: the scope's queries stay lexical and say so), and a write that fails part way leaves nothing
  behind, so a cache never takes the room the service's own writes need.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from django.db.models import Count, Max
from django.utils import timezone

from fermix_site.conf import conf
from fermix_site.enqueue import enqueue
from fermix_site.storage import NoRoom, room_for
from memory.models import Embedding
from memory.vectors import scope_rows

try:
    import usearch
    from usearch.index import Index, MetricKind
except ImportError:  # the index is optional: without it large scopes answer `vector_index_unavailable`
    usearch = Index = MetricKind = None

logger = logging.getLogger("fermix.memory.ann")

CONNECTIVITY, EXPANSION_ADD, EXPANSION_SEARCH = 16, 128, 128  # HNSW: edges per node, build and search breadth
FOLD_EVERY = 10_000  # vectors stored since the build that `refresh` folds into the index
READ_BATCH = 20_000
QUEUE_EVERY_S = 60.0
FORMAT = 1

_opened: dict[tuple, Opened] = {}
_lock = threading.Lock()
_queued: dict[str, float] = {}
_refused: dict[tuple, tuple[int, int, int]] = {}  # a file version found unreadable, not read again


def available() -> bool:
    return Index is not None


@dataclass(frozen=True)
class Meta:
    """What an index file holds; written beside it after it."""

    format: int
    library: str
    model_id: str
    kind: str
    agent_id: str
    dimensions: int
    last_id: int  # the highest `embeddings.id` in the index
    top_object: int  # the highest object id in it (messages are embedded in id order)
    count: int  # the vectors in the index (every `embeddings` row of the scope up to last_id)
    size: int  # the file's bytes
    digest: str  # blake2b of the file
    built_at: str
    total: list[float] | None = None  # the sum of its vectors (a mean to centre on); None: built before it was kept
    stat: list[int] | None = None  # the file's inode, size and modification time (ns) when its digest was taken


@dataclass
class Opened:
    index: object
    meta: Meta
    stat: tuple[int, int, int]


def folder(agent_id: str) -> Path:
    return conf.home / "cache" / "vectors" / agent_id


def index_path(model_id: str, kind: str, agent_id: str) -> Path:
    """The index file of one agent, kind and model (the model id hashed: it may hold any character)."""
    return folder(agent_id) / f"{kind}-{hashlib.sha256(model_id.encode()).hexdigest()[:16]}.usearch"


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".json")


def read_meta(path: Path) -> Meta | None:
    try:
        meta = Meta(**json.loads(_meta_path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None
    return meta if meta.format == FORMAT else None


def _digest(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def opened(model_id: str, kind: str, agent_id: str) -> Opened | None:
    """The agent's index for this model and kind, memory-mapped once per file version; None when there is
    none on this node or it is not whole (its size or digest differs from its meta, usearch refuses it)."""
    if not available():
        return None
    path = index_path(model_id, kind, agent_id)
    stat = _stat(path)
    if stat is None:
        return None
    key = (model_id, kind, agent_id)
    with _lock:
        current, refused = _opened.get(key), _refused.get(key)
    if current is not None and current.stat == stat:
        return current
    if refused == stat:
        return None
    meta = read_meta(path)
    index = _restore(path, meta) if meta and (meta.model_id, meta.kind, meta.agent_id) == key else None
    if index is None:
        with _lock:
            _refused[key] = stat
        return None
    current = Opened(index, meta, stat)
    with _lock:
        _opened[key] = current
    return current


def _restore(path: Path, meta: Meta):
    """The file memory-mapped, or None when it is not the whole file its meta describes."""
    if not _whole(path, meta):
        return None
    try:
        index = Index.restore(str(path), view=True)
    except (RuntimeError, ValueError, OSError) as exc:
        logger.warning("vector index %s unreadable: %s", path, exc)
        return None
    if index is None or index.ndim != meta.dimensions or len(index) != meta.count:
        return None
    index.expansion_search = EXPANSION_SEARCH  # a search setting: not kept in the file
    return index


def nearest_keys(current: Opened, vector: np.ndarray, count: int) -> list[int]:
    """The `embeddings` ids of about the `count` nearest vectors in the index, best first."""
    if not current.meta.count:
        return []
    matches = current.index.search(np.asarray(vector, dtype=np.float32), min(count, current.meta.count), threads=1)
    return [int(k) for k in matches.keys]


def current_vectors(keys: list[int]) -> list[tuple[int, int, bytes]]:
    """(embedding id, object id, stored vector) of the keys whose row still exists: the others were
    removed (erased, archived, changed) since the index was built and are never returned."""
    return list(Embedding.objects.filter(pk__in=keys).values_list("pk", "object_id", "vector"))


def clear() -> None:
    """Forget what this process opened, refused and asked for, as a new process starts."""
    with _lock:
        _opened.clear()
        _refused.clear()
        _queued.clear()


# --- building --------------------------------------------------------------------------------------------


def _scope_rows(model_id: str, kind: str, agent_id: str):
    return scope_rows(model_id, kind, {"agent_id": agent_id})


def _add(index, rows, dimensions: int, threads: int) -> tuple[int, np.ndarray]:
    """Add (id, vector) rows to the index a batch at a time; returns how many, and the sum of their vectors."""
    added, keys, blobs = 0, [], []
    total = np.zeros(dimensions, dtype=np.float32)

    def flush():
        nonlocal added, total
        if keys:
            vectors = np.frombuffer(b"".join(blobs), dtype="<f2").reshape(-1, dimensions).astype(np.float32)
            index.add(np.asarray(keys, dtype=np.uint64), vectors, threads=threads)
            added += len(keys)
            total = total + vectors.sum(axis=0)
            keys.clear()
            blobs.clear()

    for pk, blob in rows.iterator(chunk_size=READ_BATCH):
        keys.append(pk)
        blobs.append(bytes(blob))
        if len(keys) >= READ_BATCH:
            flush()
    flush()
    return added, total


def _new_index(dimensions: int):
    return Index(ndim=dimensions, metric="cos", dtype="i8", connectivity=CONNECTIVITY,
                 expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)


def _check_room(path: Path, count: int, size: int) -> None:
    if not room_for(path.parent, size):
        raise NoRoom(f"{count:,} vectors, {size >> 20} MiB, do not fit under {path.parent} above the "
                     f"{conf.storage.min_free_mb} MiB kept free")


def _expected_size(count: int, dimensions: int) -> int:
    """About what usearch writes for `count` vectors: each its int8 values, key and edges (533 bytes at 384
    dimensions). Checked before a build, so that a node short of room does not build an index at every
    pass only to drop it; the written size is checked again before the write."""
    return count * (dimensions + 10 * CONNECTIVITY)


def fits(model_id: str, dimensions: int, kind: str, agent_id: str, count: int) -> bool:
    """Whether an index of `count` vectors would fit on this node's disk above `min_free_mb` (for `doctor`)."""
    return room_for(index_path(model_id, kind, agent_id).parent, _expected_size(count, dimensions))


def _save(index, path: Path, meta: Meta) -> Meta:
    """Write the index beside its final name, then its meta, then rename the index over the old one."""
    _check_room(path, meta.count, index.serialized_length)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        index.save(str(tmp))
    except BaseException:  # a disk that filled meanwhile (usearch: "Failed to serialize into stream")
        tmp.unlink(missing_ok=True)
        raise
    os.chmod(tmp, 0o600)
    meta = Meta(**{**asdict(meta), "size": tmp.stat().st_size, "digest": _digest(tmp), "stat": list(_stat(tmp)),
                   "built_at": timezone.now().isoformat()})  # (a rename keeps the inode and the time)
    # The meta first: a reader between the two renames sees the old file unlike its meta and refuses that
    # version; the new file, a new inode, is read at the next search.
    _write_meta(path, meta)
    os.replace(tmp, path)
    return meta


def _write_meta(path: Path, meta: Meta) -> None:
    meta_tmp = _meta_path(path).with_name(_meta_path(path).name + ".tmp")
    meta_tmp.write_text(json.dumps(asdict(meta), indent=1), encoding="utf-8")
    os.replace(meta_tmp, _meta_path(path))


def build(model_id: str, dimensions: int, kind: str, agent_id: str, *, threads: int = 1) -> Meta:
    """A new index of every vector of the scope stored now, from the database."""
    rows = _scope_rows(model_id, kind, agent_id).order_by("id").values_list("id", "vector")
    last_id = _scope_rows(model_id, kind, agent_id).order_by("-id").values_list("id", flat=True).first() or 0
    path = index_path(model_id, kind, agent_id)
    expected = rows.filter(id__lte=last_id).count()
    _check_room(path, expected, _expected_size(expected, dimensions))
    index = _new_index(dimensions)
    count, total = _add(index, rows.filter(id__lte=last_id), dimensions, threads)
    meta = Meta(FORMAT, f"usearch {usearch.__version__}", model_id, kind, agent_id, dimensions, last_id,
                _top_object(model_id, kind, agent_id, last_id), count, 0, "", "", [float(x) for x in total])
    return _save(index, path, meta)


def extend(meta: Meta, *, threads: int = 1) -> Meta:
    """The index with the vectors stored since it was built added (the file is rewritten whole)."""
    path = index_path(meta.model_id, meta.kind, meta.agent_id)
    rows = _scope_rows(meta.model_id, meta.kind, meta.agent_id).filter(id__gt=meta.last_id).order_by("id")
    last_id = rows.order_by("-id").values_list("id", flat=True).first() or meta.last_id
    expected = meta.count + rows.filter(id__lte=last_id).count()
    _check_room(path, expected, _expected_size(expected, meta.dimensions))
    index = Index.restore(str(path), view=False)
    added, total = _add(index, rows.filter(id__lte=last_id).values_list("id", "vector"), meta.dimensions, threads)
    return _save(index, path, Meta(**{**asdict(meta), "last_id": last_id, "count": meta.count + added,
                                      "top_object": _top_object(meta.model_id, meta.kind, meta.agent_id, last_id),
                                      "total": [float(a + b) for a, b in zip(meta.total, total, strict=True)]}))


def _top_object(model_id: str, kind: str, agent_id: str, last_id: int) -> int:
    return (_scope_rows(model_id, kind, agent_id).filter(id__lte=last_id).aggregate(top=Max("object_id"))["top"]
            or 0)


@contextlib.contextmanager
def _building(path: Path):
    """One builder per index on this node (an advisory lock beside it); yields False when another holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def refresh_one(model_id: str, dimensions: int, kind: str, agent_id: str, *, threads: int = 1,
                rebuild: bool = False) -> str:
    """Bring one index up to date: `built` (none, unreadable, a vector it holds was removed, or
    `rebuild`), `extended` (FOLD_EVERY or more vectors since), `current`, `busy` (another builds it), or
    `no_room` (it does not fit on its disk above `min_free_mb`: a file there that is still usable is kept,
    one holding a removed vector is deleted)."""
    path = index_path(model_id, kind, agent_id)
    with _building(path) as mine:
        if not mine:
            return "busy"
        meta = read_meta(path)
        # Unusable as it is: missing, damaged, of another dimension, or holding a vector removed since.
        unusable = not _whole(path, meta) or meta.dimensions != dimensions or _removed(meta)
        try:
            if unusable or rebuild or meta.total is None:  # (no sum: built before it was kept; searched uncentred)
                build(model_id, dimensions, kind, agent_id, threads=threads)
                return "built"
            if _scope_rows(model_id, kind, agent_id).filter(id__gt=meta.last_id)[:FOLD_EVERY].count() >= FOLD_EVERY:
                extend(meta, threads=threads)
                return "extended"
        except NoRoom as exc:
            logger.warning("vector index of %s's %s vectors not written: %s", agent_id, kind, exc)
            if unusable:  # what was erased leaves this node's disk even so
                remove(path)
            return "no_room"
        if meta.stat is None or tuple(meta.stat) != _stat(path):  # found whole by its digest: known by its stat now
            _write_meta(path, Meta(**{**asdict(meta), "stat": list(_stat(path))}))
        return "current"


def _whole(path: Path, meta: Meta | None) -> bool:
    """True when the file is the one its meta describes (size and digest), so not cut short or damaged.
    The digest is taken when the file is built, and the file is read whole again only when its inode, size
    or modification time is not what they were then: hashing the 322 MB index of a million messages took
    0.48 s, at every process's first search of it and at every pass of the schedule."""
    stat = _stat(path)
    if meta is None or stat is None or meta.size != stat[1]:
        return False
    return (meta.stat is not None and tuple(meta.stat) == stat) or _digest(path) == meta.digest


def _removed(meta: Meta) -> bool:
    """True when a vector the index holds is no longer stored (every row up to last_id is in it)."""
    return _scope_rows(meta.model_id, meta.kind, meta.agent_id).filter(id__lte=meta.last_id).count() != meta.count


def large_scopes(model_id: str, agent_id: str | None = None) -> list[tuple[str, str, int]]:
    """(agent, kind, vectors) of every scope past exact search's limit under the model."""
    rows = Embedding.objects.filter(model_id=model_id)
    if agent_id:
        rows = rows.filter(agent_id=agent_id)
    counts = rows.values_list("agent_id", "kind").annotate(n=Count("id")).order_by("agent_id", "kind")
    return [(agent, kind, n) for agent, kind, n in counts if n > conf.embeddings.exact_max_vectors]


def refresh(model_id: str, dimensions: int, *, agent_id: str | None = None, threads: int = 1,
            rebuild: bool = False) -> dict[tuple[str, str], str]:
    """Every index the model's large scopes need brought up to date, and the files no scope needs any
    more (a scope that shrank, an erased agent, another model) removed. Returns {(agent, kind): outcome}."""
    if not available():
        return {}
    done, wanted = {}, set()
    for agent, kind, _ in large_scopes(model_id, agent_id):
        wanted.add(index_path(model_id, kind, agent))
        done[(agent, kind)] = refresh_one(model_id, dimensions, kind, agent, threads=threads, rebuild=rebuild)
    for stale in _files(agent_id):
        if stale not in wanted:
            remove(stale)
            done[(stale.parent.name, stale.stem.split("-")[0])] = "removed"
    return done


def _files(agent_id: str | None) -> list[Path]:
    root = conf.home / "cache" / "vectors"
    pattern = f"{agent_id}/*.usearch" if agent_id else "*/*.usearch"
    return sorted(root.glob(pattern)) if root.exists() else []


def remove(path: Path) -> None:
    """An index file and its meta gone (a process that has it mapped keeps its pages until it lets go)."""
    for part in (path, _meta_path(path), path.with_name(path.name + ".tmp")):
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


def queue_refresh(agent_id: str) -> None:
    """Ask the cluster to build or refresh an agent's indexes, at most once a minute per process."""
    now = time.monotonic()
    with _lock:
        if now - _queued.get(agent_id, -QUEUE_EVERY_S) < QUEUE_EVERY_S:
            return
        _queued[agent_id] = now
    enqueue("memory.tasks.vector_index_task", agent_id, keep=False, task_name="vector index", group="embeddings")
    flag = wanted()
    with contextlib.suppress(OSError):  # (a full disk: the task and the schedule still run)
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.touch()  # the task runs on one node: this node's heartbeat runs its own pass for it too


def wanted() -> Path:
    """The flag a process of this node raises when it lacks an index (`memory.search.upkeep` reads it)."""
    return conf.home / "cache" / "vectors" / "wanted"


def status() -> list[dict]:
    """Every index file on this node, with what its meta says (for `doctor`)."""
    out = []
    for path in _files(None):
        meta = read_meta(path)
        stat = _stat(path)
        out.append({"agent_id": path.parent.name, "file": str(path), "bytes": stat[1] if stat else 0,
                    "whole": _whole(path, meta),
                    **({"kind": meta.kind, "model_id": meta.model_id, "vectors": meta.count,
                        "built_at": meta.built_at} if meta else {})})
    return out
