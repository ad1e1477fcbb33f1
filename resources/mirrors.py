"""Each node's mirror of the prompt files: the database holds every file, `$FERMIX_HOME` holds a copy.

The current revision of each file-backed resource is the file; composing a prompt reads it from the
database. The files under `$FERMIX_HOME/bootstrap/` and `$FERMIX_HOME/memory/` are this node's mirror of
those revisions, rewritten (atomically) when they differ: on compose, when this node writes a revision,
and on the node's heartbeat. An operator can read or edit them on any node.

Telling a hand edit from a stale mirror. Every node keeps, per agent, the hash of the bytes it last wrote
to (or found current in) each mirror: `$FERMIX_HOME/mirrors/<agent_id>.json`. A mirror whose bytes
differ from that record was edited on this node, and becomes one `manual_edit` revision (`imported`
when the resource has none yet). A mirror that still holds what the node last wrote is merely stale
(another node committed since) and is rewritten, never mistaken for an edit. A node with no record for
a file (a new node, or `mirrors/` removed) takes a mirror that equals any revision of the resource for
stale, anything else for an edit.

Every write of a mirror and of its record happens under one lock per agent and node
(`$FERMIX_HOME/mirrors/<agent_id>.lock`, an advisory `flock`), so the processes of a node agree. A
process that holds a resource's database lock may take the mirror lock, never the other way round.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fermix_site.conf import conf
from resources import files
from resources.catalog import FILE_NAMES, check_agent
from resources.models import GLOBAL_SCOPE, ResourceRevision

log = logging.getLogger("fermix.resources")

_seen_lock = threading.Lock()
# path -> the (mtime, size, inode) at which this process last found the mirror accounted for
_seen: dict[Path, tuple[int, int, int]] = {}


def _folder() -> Path:
    return Path(conf.home) / "mirrors"


def _record_path(agent_id: str) -> Path:
    return _folder() / f"{check_agent(agent_id)}.json"


@contextmanager
def mirror_lock(agent_id: str) -> Iterator[None]:
    """This node's lock on the agent's mirrors and their record, across its processes."""
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(folder / f"{check_agent(agent_id)}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def records(agent_id: str) -> dict[str, str]:
    """resource type -> sha256 of the bytes this node last wrote to (or found current in) its mirror."""
    try:
        data = json.loads(_record_path(agent_id).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def _set_record(agent_id: str, resource_type: str, digest: str | None) -> None:
    """Update one record; call with `mirror_lock` held. `None` forgets it."""
    known = records(agent_id)
    if known.get(resource_type) == digest:
        return
    if digest is None:
        known.pop(resource_type, None)
    else:
        known[resource_type] = digest
    # Not synced: a record lost or cut short in a crash reads as none, and a node with no record still
    # tells a stale mirror by the revisions (see the module's doc).
    files.write_atomic(_record_path(agent_id), json.dumps(known, sort_keys=True, indent=1).encode("utf-8"),
                       durable=False)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


def _seen_now(path: Path) -> None:
    stamp = _stamp(path)
    with _seen_lock:
        if stamp is None:
            _seen.pop(path, None)
        else:
            _seen[path] = stamp


def seen(path: Path) -> None:
    """This process found the mirror accounted for as it is now."""
    _seen_now(path)


def unsee(path: Path) -> None:
    """Check the mirror again at the next compose (its record was put back)."""
    with _seen_lock:
        _seen.pop(path, None)


def node_name() -> str:
    """How this node is named in the revisions it records: `FERMIX_NODE_NAME`, or the host name."""
    return os.environ.get("FERMIX_NODE_NAME") or socket.gethostname()


def forget_seen() -> None:
    """Forget which mirrors this process found accounted for (tests; after FERMIX_HOME changes)."""
    with _seen_lock:
        _seen.clear()


def is_hand_edit(*, agent_id: str, resource_type: str, digest: str) -> bool:
    """Whether a mirror holding bytes with this sha256 was edited on this node (see the module's doc)."""
    recorded = records(agent_id).get(resource_type)
    if recorded is not None:
        return digest != recorded
    return not ResourceRevision.objects.filter(agent_id=agent_id, resource_type=resource_type,
                                               scope_id=GLOBAL_SCOPE, content_hash=digest).exists()


def accounted_for(*, agent_id: str, resource_type: str, path: Path, digest: str) -> None:
    """Record that the mirror now holds bytes this node knows (written, found current, or captured)."""
    with mirror_lock(agent_id):
        _set_record(agent_id, resource_type, digest)
    _seen_now(path)


def restore_record(*, agent_id: str, resource_type: str, digest: str | None) -> None:
    """Put a record back as it was (a write undone after its transaction failed)."""
    with mirror_lock(agent_id):
        _set_record(agent_id, resource_type, digest)


def write_mirror(*, agent_id: str, resource_type: str, content: str, unless_edited: bool = True) -> bool:
    """Make this node's mirror hold `content` and record it; False when it was left alone because it
    holds a hand edit not yet captured (`unless_edited`), which the next check records first."""
    path = files.resource_file_path(agent_id=agent_id, resource_type=resource_type)
    data = content.encode("utf-8")
    digest = files.bytes_hash(data)
    with mirror_lock(agent_id):
        found = files.read_bytes(path)
        if found != data:
            if unless_edited and found is not None and is_hand_edit(
                    agent_id=agent_id, resource_type=resource_type, digest=files.bytes_hash(found)):
                return False
            files.write_atomic(path, data)
        _set_record(agent_id, resource_type, digest)
    _seen_now(path)
    return True


def changed_since_seen(agent_id: str) -> list[str]:
    """The file types whose mirror this process has not yet found accounted for at its present size,
    time and inode: a stat per file, nothing more when nothing changed."""
    changed = []
    for resource_type in FILE_NAMES:
        path = files.resource_file_path(agent_id=agent_id, resource_type=resource_type)
        stamp = _stamp(path)
        with _seen_lock:
            seen = _seen.get(path)
        if stamp != seen:  # edited, replaced, created, or removed since
            changed.append(resource_type)
    return changed
