"""Storage: how durable a commit is, what counts as a full disk or database, and how much room
`$FERMIX_HOME` has left.

A full disk reaches the code in three shapes: SQLite's SQLITE_FULL ("database or disk is full", also
given when `max_page_count` is reached), PostgreSQL's `disk_full` (SQLSTATE 53100) and an `OSError`
with ENOSPC (or EDQUOT, a quota reached) from a file write. Django wraps the database ones in its own
`OperationalError`; `is_storage_full` looks through the chain, so every caller asks one question.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path

from fermix_site.conf import conf

# `[fermix_core.storage] durability` as SQLite's `synchronous`. In WAL, NORMAL syncs at checkpoints only,
# so a power cut may lose the last commits (never the database's consistency); FULL syncs the WAL at
# every commit. docs/reliability.md says what each survives and what FULL costs.
SQLITE_SYNCHRONOUS = {"normal": "NORMAL", "full": "FULL"}
SYNCHRONOUS_LEVELS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}  # what `PRAGMA synchronous` answers

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
PG_DISK_FULL = "53100"
STORAGE_FULL_MESSAGE = ("the disk or the database is full; nothing was written. Free some space (or raise the "
                        "database's quota), then send the request again")


def sqlite_init_command(durability: str) -> str:
    """The statements each new SQLite connection runs (settings' `init_command`)."""
    return f"PRAGMA journal_mode=WAL; PRAGMA synchronous={SQLITE_SYNCHRONOUS[durability]}; PRAGMA foreign_keys=ON;"


def _says_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in FULL_ERRNOS
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(exc, sqlite3.Error) and code is not None:
        return code & 0xFF == sqlite3.SQLITE_FULL  # the primary code of an extended one
    return getattr(exc, "sqlstate", None) == PG_DISK_FULL


def is_storage_full(exc: BaseException | None) -> bool:
    """True when `exc`, or an error it was raised from or while handling, says the storage is full."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if _says_full(exc):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def free_bytes(path=None) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path` (default FERMIX_HOME)."""
    stats = os.statvfs(path or conf.home)
    return stats.f_bavail * stats.f_frsize


def room_for(path: Path, size: int, keep_free: int | None = None) -> bool:
    """Whether `size` more bytes fit on the disk holding `path` (or its nearest folder that exists) and still
    leave `keep_free` bytes free (default `[fermix_core.storage] min_free_mb`). A rebuildable cache (the
    embedding model's graph, the vector indexes, the files of scopes' vectors) asks before it writes, so
    that it never takes the room the service's own writes need; False when the disk cannot be read."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    try:
        free = free_bytes(existing)
    except OSError:
        return False
    return free - size >= (conf.storage.min_free_bytes if keep_free is None else keep_free)


class NoRoom(Exception):
    """A write stopped before it took the room `[fermix_core.storage] min_free_mb` keeps for the service."""


ROOM_CHECK_BYTES = 1 << 20


def keeping_room(path: Path, chunks: Iterable[bytes], *, every: int = ROOM_CHECK_BYTES) -> Iterator[bytes]:
    """`chunks` passed on while the next `every` bytes still fit on the disk holding `path` above
    `min_free_mb`: checked before the first chunk and each time another `every` bytes have passed; raises
    NoRoom otherwise. For a write whose size is known only once it is done (an export), so that it stops
    short of the service's room instead of filling the disk and refusing every append while it runs."""
    unchecked = 0
    for chunk in chunks:
        if unchecked == 0 or unchecked >= every:
            if not room_for(path, every):
                raise NoRoom(f"writing more under {path.parent} would leave less than the "
                             f"{conf.storage.min_free_mb} MiB kept free for the service's own writes")
            unchecked = 0
        unchecked += len(chunk)
        yield chunk


def storage_state() -> dict:
    """`{"ok", "free_bytes"}` for /healthz and doctor: ok while at least `min_free_mb` is free.

    The margin is there because a write needs room beyond its own bytes (SQLite checkpoints its WAL
    into the database file, a prompt file is written beside the old one before the rename), and because
    a warning before the first refused write is worth more than one after it.
    """
    try:
        free = free_bytes()
    except OSError as exc:
        return {"ok": False, "free_bytes": None, "error": str(exc)[:200]}
    return {"ok": free >= conf.storage.min_free_bytes, "free_bytes": free}
