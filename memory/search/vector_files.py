"""A node's files of large scopes' vectors, so that a fresh process reads a conversation's or an owner's
vectors from one file instead of from thousands of database rows.

Exact search (`memory.search.semantic`) holds each scope's vectors in the process. A scope's rows in
`embeddings` lie among every other conversation's, so reading them costs a page a vector: 41,745 vectors
took 144–233 ms at a million messages, paid by every new worker process at its first query of that
scope. A process that has read at least FROM_VECTORS vectors of a scope from the database therefore
writes what it holds to
`$FERMIX_HOME/cache/vectors/<agent>/scopes/<kind>-<hash>.vectors` (mode 0600; beside, then renamed over),
stamped with the generation of the agent's vectors of that kind it read them at (`memory.vectors`). Other
processes of the node map the file (its pages are the operating system's, shared by all of them) and read
from the database only the rows stored after it.

A file is a cache, never a source of truth. Any removal of a vector of the agent and kind (a memory row
changed or archived, an erasure) bumps the generation, so from that commit on no process of any node
reads a file written before it; a stale file is deleted where it is found and by the schedule
`fermix-vector-index` (`sweep`), which an erasure also queues. Any file may be deleted at any time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fermix_site import generations
from fermix_site.conf import conf
from memory.vectors import vectors_generation

logger = logging.getLogger("fermix.memory.vector_files")

FROM_VECTORS = 500  # a scope read from the database with at least this many vectors is written to its file
MAGIC = b"FERMIX-VECTORS-3"  # 2: the header holds the sum of the vectors; 3: each vector's `embeddings.id`
ALIGN = 64
ABANDONED_S = 600  # a temporary file this old was left by a process that died writing it


@dataclass(frozen=True)
class Stored:
    ids: np.ndarray  # object ids, int64, memory-mapped
    matrix: np.ndarray  # float16 unit vectors, one a row, memory-mapped
    last_id: int  # the highest `embeddings.id` the file holds
    top_object: int  # the highest object id it holds
    total: np.ndarray  # the sum of the vectors, float32 (the scope's mean times its size)
    keys: np.ndarray  # each row's `embeddings.id`, int64, memory-mapped


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
    `generation`; None otherwise (a stale, damaged or foreign file is deleted)."""
    where = path(model_id, kind, scope)
    try:
        with open(where, "rb") as file:  # mapped through the same open file: a rename over it changes nothing
            header, offset = _header(file)
            found = _verdict(header, os.fstat(file.fileno()).st_size - offset,
                             (model_id, kind, _pinned(scope), dimensions), generation)
            if found == "current":
                return _mapped(file, header, offset) if header["count"] else None
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        logger.warning("vectors file %s unreadable: %s", where, exc)
        found = "damaged"
    if found != "newer":
        remove(where)
    return None


def _verdict(header: dict, size: int, identity: tuple, generation: tuple[int, ...]) -> str:
    """`current`; `newer` (written after a removal this process has not seen yet: only not used); `stale`
    (written before a removal now committed); `damaged` (cut short) or `foreign` (another scope's)."""
    if (header["model_id"], header["kind"], header["scope"], header["dimensions"]) != identity:
        return "foreign"
    if size != header["count"] * (16 + 2 * header["dimensions"]):
        return "damaged"
    if header["generation"] == list(generation):
        return "current"
    return "stale" if _stale(header["generation"], generation) else "newer"


def _mapped(file, header: dict, offset: int) -> Stored:
    count, dimensions = header["count"], header["dimensions"]
    ids = np.memmap(file, dtype="<i8", mode="r", offset=offset, shape=(count,))
    keys = np.memmap(file, dtype="<i8", mode="r", offset=offset + 8 * count, shape=(count,))
    matrix = np.memmap(file, dtype="<f2", mode="r", offset=offset + 16 * count, shape=(count, dimensions))
    return Stored(ids, matrix, header["last_id"], header["top_object"], np.asarray(header["total"], dtype=np.float32),
                  keys)


def write(model_id: str, kind: str, scope: dict, generation: tuple[int, ...], stored: Stored) -> None:
    """Write the scope's vectors to its file. A cache: a failure (a full disk) is logged, never raised."""
    where = path(model_id, kind, scope)
    header = json.dumps({"model_id": model_id, "kind": kind, "scope": _pinned(scope),
                         "dimensions": int(stored.matrix.shape[1]), "generation": list(generation),
                         "count": len(stored.ids), "last_id": stored.last_id,
                         "top_object": stored.top_object,
                         "total": [float(x) for x in np.asarray(stored.total, dtype=np.float32)]}).encode()
    start = MAGIC + struct.pack("<I", len(header)) + header
    tmp = where.with_name(f"{where.name}.{os.getpid()}.tmp")
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as file:
            file.write(start.ljust(_aligned(len(start)), b"\0"))
            file.write(np.ascontiguousarray(stored.ids, dtype="<i8").tobytes())
            file.write(np.ascontiguousarray(stored.keys, dtype="<i8").tobytes())
            file.write(np.ascontiguousarray(stored.matrix, dtype="<f2").tobytes())
        os.replace(tmp, where)
    except OSError as exc:
        logger.warning("vectors file %s not written: %s", where, exc)
        remove(tmp)


def remove(where: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        where.unlink()


def _files(agent_id: str | None, suffix: str = ".vectors") -> list[Path]:
    root = conf.home / "cache" / "vectors"
    pattern = f"{agent_id or '*'}/scopes/*{suffix}"
    return sorted(root.glob(pattern)) if root.exists() else []


def sweep(model_id: str, agent_id: str | None = None) -> int:
    """Delete the files that no search will read again: of another model, or written before a removal of
    the agent's vectors (an erasure, a changed or archived memory row), or left half-written by a process
    that died writing. Returns how many."""
    removed = 0
    for where in _files(agent_id, ".tmp"):
        with contextlib.suppress(OSError):
            if time.time() - where.stat().st_mtime > ABANDONED_S:
                remove(where)
                removed += 1
    for where in _files(agent_id):
        try:
            with open(where, "rb") as file:
                header, _ = _header(file)
            agent = dict(header["scope"])["agent_id"]
            keep = header["model_id"] == model_id and not _stale(
                header["generation"], generations.current([vectors_generation(agent, header["kind"])]))
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            keep = False
        if not keep:
            remove(where)
            removed += 1
    return removed
