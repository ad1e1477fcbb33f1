"""A node's files of large scopes' vectors, so that a fresh process reads a conversation's or an owner's
vectors from one file instead of from thousands of database rows.

Exact search (`memory.search.semantic`) holds each scope's vectors in the process. A scope's rows in
`embeddings` lie among every other conversation's, so reading them costs a page a vector: 41,745 vectors
took 144–233 ms at a million messages, paid by every new worker process at its first query of that
scope. A process that has read FROM_VECTORS more vectors of a scope from the database therefore writes
what it holds (on a thread of its own, `memory.search.semantic`) to
`$FERMIX_HOME/cache/vectors/<agent>/scopes/<kind>-<hash>.vectors` (mode 0600; beside, then renamed over),
stamped with the generation of the agent's vectors of that kind it read them at (`memory.vectors`). Other
processes of the node map the file (its pages are the operating system's, shared by all of them), and so
does the process that wrote it; each reads from the database only the rows stored after it and keeps them
in a block of its own beside the mapped ones (`Stored.recent`), until FROM_VECTORS of them have been read
and the file is written again.

A file is a cache, never a source of truth. Any removal of a vector of the agent and kind (a memory row
changed or archived, an erasure) bumps the generation, so from that commit on no process of any node
uses a file written before it as it is: a stale file is brought current where it is found (`current`: the
rows whose `embeddings` ids are gone from the scope are dropped, and the file is written again at the
generation they were checked at) and by the node's pass over its vector caches (`sweep`, which each node's
heartbeat runs within a heartbeat of a removal: `memory.search.upkeep`), so a removed vector stays in no
file past that pass. Any file may be deleted at any time. A file is written only where it fits on its
disk above `[fermix_core.storage] min_free_mb`: a cache never takes the room the service's writes need.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from django.db.models import Count, Sum

from fermix_site import generations
from fermix_site.conf import conf
from fermix_site.storage import room_for
from memory.vectors import scope_rows, vectors_generation

logger = logging.getLogger("fermix.memory.vector_files")

FROM_VECTORS = 500  # a scope read from the database with at least this many vectors is written to its file
MAGIC = b"FERMIX-VECTORS-3"  # 2: the header holds the sum of the vectors; 3: each vector's `embeddings.id`
ALIGN = 64
ABANDONED_S = 600  # a temporary file this old was left by a process that died writing it


@dataclass(frozen=True)
class Stored:
    """A scope's vectors: those of its file (memory-mapped) or first read from the database (`matrix`), then
    those a process has read since (`recent`), in the order of `ids`."""

    ids: np.ndarray  # object ids, int64
    matrix: np.ndarray  # float16 unit vectors, one a row
    last_id: int  # the highest `embeddings.id` held
    top_object: int  # the highest object id held
    total: np.ndarray  # the sum of the vectors, float32 (the scope's mean times its size)
    keys: np.ndarray  # each row's `embeddings.id`, int64
    stale: bool = False  # written before a removal now committed: `current` drops what was removed
    # The rows read after `matrix`, in a block of their own: adding a conversation's new message to the
    # matrix copied it whole into the process (32 MB, 6-130 ms, at the first query after each message in
    # a conversation of 41,745), where the file's pages are shared by the node's processes.
    recent: np.ndarray | None = None

    @property
    def blocks(self) -> tuple[np.ndarray, ...]:
        """The vectors in the order of `ids`, in their non-empty blocks (one at least)."""
        if self.recent is None or not len(self.recent):
            return (self.matrix,)
        return (self.matrix, self.recent) if len(self.matrix) else (self.recent,)

    @property
    def dimensions(self) -> int:
        return int(self.matrix.shape[1])

    def adding(self, ids: np.ndarray, keys: np.ndarray, vectors: np.ndarray, last_id: int) -> Stored:
        """These vectors added after the others (`recent` copied, never `matrix`)."""
        recent = vectors if self.recent is None else np.concatenate([self.recent, vectors])
        return Stored(np.concatenate([self.ids, ids]), self.matrix, last_id, max(self.top_object, int(ids.max())),
                      self.total + vectors.sum(axis=0, dtype=np.float32), np.concatenate([self.keys, keys]),
                      self.stale, recent)


def folder(agent_id: str) -> Path:
    return conf.home / "cache" / "vectors" / agent_id / "scopes"


def _pinned(scope: dict) -> list[list[str]]:
    """A scope's columns and values in one order, as the file's name and header hold them."""
    return sorted([column, value] for column, value in scope.items())


def path(model_id: str, kind: str, scope: dict) -> Path:
    """The file of one scope (its filters and the model hashed: they may hold any character)."""
    key = json.dumps([model_id, kind, _pinned(scope)])
    return folder(scope["agent_id"]) / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.vectors"


def _header(file) -> tuple[dict, int]:
    """The file's header and where its arrays start; ValueError when it is not such a file."""
    if file.read(len(MAGIC)) != MAGIC:
        raise ValueError("not a vectors file")
    (length,) = struct.unpack("<I", file.read(4))
    header = json.loads(file.read(length))
    return header, _aligned(len(MAGIC) + 4 + length)


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _stale(written: list[int], current: tuple[int, ...]) -> bool:
    """Whether a file's generation is older than the current one: written before a removal now committed."""
    return any(w < c for w, c in zip(written, current, strict=True))


def read(model_id: str, kind: str, scope: dict, generation: tuple[int, ...], dimensions: int) -> Stored | None:
    """The scope's vectors from its file, memory-mapped, when the file holds the model's vectors at
    `generation`, or at an earlier one (`stale`: pass it through `current` before any use); None otherwise
    (a damaged or foreign file is deleted)."""
    where = path(model_id, kind, scope)
    try:
        with open(where, "rb") as file:  # mapped through the same open file: a rename over it changes nothing
            header, offset = _header(file)
            found = _verdict(header, os.fstat(file.fileno()).st_size - offset,
                             (model_id, kind, _pinned(scope), dimensions), generation)
            if found in ("current", "stale"):
                return _mapped(file, header, offset, found == "stale") if header["count"] else None
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        logger.warning("vectors file %s unreadable: %s", where, exc)
        found = "damaged"
    if found != "newer":
        remove(where)
    return None


def still_held(model_id: str, kind: str, scope: dict, keys: np.ndarray, after_id: int = 0) -> np.ndarray:
    """Which of `keys` (`embeddings` ids of the scope's vectors, all past `after_id`) the scope still holds, as
    a mask, from the scope's index alone (no vector is read). An id is never used again (AUTOINCREMENT on
    SQLite, a sequence on PostgreSQL), so where the scope holds as many ids up to the highest of `keys` as
    `keys` has, it holds them all, and where one fewer, the one gone is what the sums of the ids differ by:
    one statement that returns no id, for what a changed memory row removes (its one vector). Where more
    are gone every id is read: reading an agent's 29,588 memory rows' ids took 11-27 ms, at each held
    scope's first query after any memory row changed; counting them 3."""
    keep = np.ones(len(keys), dtype=bool)
    if not len(keys):
        return keep
    keys = np.asarray(keys, dtype=np.int64)
    rows = scope_rows(model_id, kind, scope, after_id).filter(id__lte=int(keys.max())).order_by()
    counted = rows.aggregate(count=Count("id"), total=Sum("id"))
    if counted["count"] == len(keys):
        return keep
    if counted["count"] == len(keys) - 1:
        keep = keys != int(keys.sum()) - int(counted["total"])
        if int((~keep).sum()) == 1:
            return keep
    return np.isin(keys, np.fromiter(rows.values_list("id", flat=True), dtype=np.int64), assume_unique=True)


def without(stored: Stored, keep: np.ndarray) -> Stored:
    """`stored` less the rows `keep` (a mask over its rows: `still_held`) leaves out; the sum of the rest.
    `top_object` stays the highest object id ever read (where new rows are looked for)."""
    if keep.all():
        return dataclasses.replace(stored, stale=False)
    first, then = keep[:len(stored.matrix)], keep[len(stored.matrix):]
    removed = stored.matrix[~first].sum(axis=0, dtype=np.float32)  # (summing what is kept: 24 ms for 30,000)
    recent = None
    if stored.recent is not None:
        removed += stored.recent[~then].sum(axis=0, dtype=np.float32)
        recent = stored.recent[then]
    return Stored(stored.ids[keep], stored.matrix[first], stored.last_id, stored.top_object, stored.total - removed,
                  stored.keys[keep], recent=recent)


def current(model_id: str, kind: str, scope: dict, generation: tuple[int, ...], stored: Stored) -> Stored:
    """A stale file's vectors at `generation` (read before the scope's ids are): without the rows removed
    since it was written, and the file written again with what is left (deleted if nothing is, or if it
    cannot be written: a removed vector stays in no file)."""
    kept = without(stored, still_held(model_id, kind, scope, stored.keys))
    if not (len(kept.ids) and write(model_id, kind, scope, generation, kept)):
        remove(path(model_id, kind, scope))
    return kept


def _verdict(header: dict, size: int, identity: tuple, generation: tuple[int, ...]) -> str:
    """`current`; `newer` (written after a removal this process has not seen yet: only not used); `stale`
    (written before a removal now committed); `damaged` (cut short) or `foreign` (another scope's)."""
    if (header["model_id"], header["kind"], header["scope"], header["dimensions"]) != identity:
        return "foreign"
    if size != _data_bytes(header["count"], header["dimensions"]):
        return "damaged"
    if header["generation"] == list(generation):
        return "current"
    return "stale" if _stale(header["generation"], generation) else "newer"


def _mapped(file, header: dict, offset: int, stale: bool = False) -> Stored:
    count, dimensions = header["count"], header["dimensions"]
    ids = np.memmap(file, dtype="<i8", mode="r", offset=offset, shape=(count,))
    keys = np.memmap(file, dtype="<i8", mode="r", offset=offset + 8 * count, shape=(count,))
    matrix = np.memmap(file, dtype="<f2", mode="r", offset=offset + 16 * count, shape=(count, dimensions))
    return Stored(ids, matrix, header["last_id"], header["top_object"], np.asarray(header["total"], dtype=np.float32),
                  keys, stale)


def _data_bytes(count: int, dimensions: int) -> int:
    """What a file holds after its header: each row's id and `embeddings` id (8 bytes each), its float16 vector."""
    return count * (16 + 2 * dimensions)


def write(model_id: str, kind: str, scope: dict, generation: tuple[int, ...], stored: Stored) -> bool:
    """Write the scope's vectors to its file; False when it was not written. A cache: a failure (a full
    disk) is logged, never raised."""
    where = path(model_id, kind, scope)
    header = json.dumps({"model_id": model_id, "kind": kind, "scope": _pinned(scope),
                         "dimensions": stored.dimensions, "generation": list(generation),
                         "count": len(stored.ids), "last_id": stored.last_id,
                         "top_object": stored.top_object,
                         "total": [float(x) for x in np.asarray(stored.total, dtype=np.float32)]}).encode()
    start = MAGIC + struct.pack("<I", len(header)) + header
    size = _aligned(len(start)) + _data_bytes(len(stored.ids), stored.dimensions)
    if not room_for(where.parent, size):
        logger.warning("vectors file %s not written: %d KiB do not fit above the %d MiB kept free", where,
                       size >> 10, conf.storage.min_free_mb)
        return False
    # One temporary file a thread: two threads of a process may write the same scope's file at once.
    tmp = where.with_name(f"{where.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as file:
            file.write(start.ljust(_aligned(len(start)), b"\0"))
            # Written from the arrays' own memory: no copy of a mapped file's 32 MB in the process.
            file.write(np.ascontiguousarray(stored.ids, dtype="<i8").data)
            file.write(np.ascontiguousarray(stored.keys, dtype="<i8").data)
            for block in stored.blocks:
                file.write(np.ascontiguousarray(block, dtype="<f2").data)
        os.replace(tmp, where)
        return True
    except OSError as exc:
        logger.warning("vectors file %s not written: %s", where, exc)
        remove(tmp)
        return False


def remove(where: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        where.unlink()


def _files(agent_id: str | None, suffix: str = ".vectors") -> list[Path]:
    root = conf.home / "cache" / "vectors"
    pattern = f"{agent_id or '*'}/scopes/*{suffix}"
    return sorted(root.glob(pattern)) if root.exists() else []


def sweep(model_id: str, agent_id: str | None = None) -> tuple[int, int]:
    """Bring current the files written before a removal of the agent's vectors (an erasure, a changed or
    archived memory row), so that what was removed leaves them; delete those no search will read: of
    another model, damaged, or left half-written by a process that died writing. Returns (deleted,
    brought current)."""
    removed = refreshed = 0
    for where in _files(agent_id, ".tmp"):
        with contextlib.suppress(OSError):
            if time.time() - where.stat().st_mtime > ABANDONED_S:
                remove(where)
                removed += 1
    for where in _files(agent_id):
        outcome = _swept(where, model_id)
        removed += outcome == "removed"
        refreshed += outcome == "refreshed"
    return removed, refreshed


def _swept(where: Path, model_id: str) -> str:
    """`kept`, `refreshed` (it was stale: brought current) or `removed`, for one of the node's files."""
    try:
        with open(where, "rb") as file:
            header, _ = _header(file)
        scope, kind = dict(header["scope"]), header["kind"]
        if header["model_id"] == model_id and where == path(model_id, kind, scope):
            generation = generations.current([vectors_generation(scope["agent_id"], kind)])
            if not _stale(header["generation"], generation):
                return "kept"
            stored = read(model_id, kind, scope, generation, header["dimensions"])
            if stored is None:  # damaged (and deleted) or emptied since
                return "removed"
            if stored.stale:
                current(model_id, kind, scope, generation, stored)
                return "refreshed" if where.exists() else "removed"
            return "kept"
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        pass
    remove(where)
    return "removed"
