"""Where each file-backed resource lives, and how its file is read and replaced.

Paths are always derived from `conf.home` and a validated agent id, then checked once more after
resolving symlinks, so no write ever lands outside `$FERMIX_HOME`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from fermix_site.conf import conf
from resources.catalog import BOOTSTRAP_FILES, MEMORY_FILES, check_agent, check_type
from resources.errors import UnknownType, UnsafePath


def resource_file_path(*, agent_id: str, resource_type: str) -> Path:
    """The file of a file-backed resource under `$FERMIX_HOME`."""
    check_agent(agent_id)
    check_type(resource_type)
    if resource_type in BOOTSTRAP_FILES:
        return conf.bootstrap_dir(agent_id) / BOOTSTRAP_FILES[resource_type]
    if resource_type in MEMORY_FILES:
        return conf.memory_dir(agent_id) / MEMORY_FILES[resource_type]
    raise UnknownType(f"{resource_type} is not backed by a file")


def _inside_home(path: Path) -> Path:
    home = Path(conf.home).resolve()
    folder = path.parent.resolve()
    if folder != home and home not in folder.parents:
        raise UnsafePath(f"{path} resolves outside FERMIX_HOME ({home}); refusing to write it")
    return folder / path.name


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def decode(data: bytes) -> str:
    # Prompt files are UTF-8 text. A stray invalid byte is replaced rather than refused, so one bad
    # character cannot take the prompt down; the replaced text is what gets versioned.
    return data.decode("utf-8", errors="replace")


def write_atomic(path: Path, data: bytes | Iterable[bytes], *, durable: bool = True) -> None:
    """Replace the file in one step: a temp file in the same folder, fsync, then rename over it.

    `data` may be an iterable of chunks, written as they come (a large export never sits in memory).
    `durable=False` skips the fsyncs, for a file whose loss or truncation in a crash is harmless (it
    is still never seen half-written)."""
    target = _inside_home(path)  # before mkdir: a symlinked folder must not lead the write elsewhere
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o600
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in [data] if isinstance(data, bytes) else data:
                fh.write(chunk)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(target.parent)


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every platform lets a folder be opened, hence best effort.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def restore(path: Path, previous: bytes | None) -> None:
    """Put a file back as it was before a write (None: it did not exist)."""
    if previous is None:
        with contextlib.suppress(FileNotFoundError):
            _inside_home(path).unlink()
    else:
        write_atomic(path, previous)


def bytes_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
