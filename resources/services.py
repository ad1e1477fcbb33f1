"""Writes of versioned resources: commit a revision, write a file with its revision, roll back.

Numbering is per (agent_id, resource_type, scope_id), from 1, gap-free. Every write locks the
resource row first (SQLite: the IMMEDIATE transaction already holds the database write lock;
PostgreSQL: SELECT … FOR UPDATE), so concurrent writers queue and each one compares its content
with the revision that is current once it holds the lock. Identical content is a no-op.

For file-backed resources the revision is the file; this node's mirror of it (`resources.mirrors`)
changes while the lock is held, and the pair stays consistent: if the mirror write fails the
transaction rolls back (no revision claims it); if the commit fails the mirror and its record are put
back as they were.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from fermix_site import generations
from resources import files, mirrors
from resources.catalog import (
    FILE_NAMES,
    check_agent,
    check_content,
    check_provenance,
    check_scope,
    check_source,
    check_type,
    content_hash,
    is_file_backed,
    rollback_caveat,
)
from resources.errors import CheckpointRollback, InvalidContent, RedactedRevision, UnknownResource, UnknownRevision
from resources.models import GLOBAL_SCOPE, MutationSource, Resource, ResourceRevision, ResourceType
from resources.selectors import resource_agents, resource_current_revisions, revision_of

log = logging.getLogger("fermix.resources")


def prompt_generation(agent_id: str) -> str:
    """The generation every cached composed prompt of the agent is checked against."""
    return f"prompt:{agent_id}"


# --- the revision engine ----------------------------------------------------------------------------


def _key(resource: Resource) -> dict:
    return {"agent_id": resource.agent_id, "resource_type": resource.resource_type, "scope_id": resource.scope_id}


def _lock_resource(*, agent_id: str, resource_type: str, scope_id: str) -> Resource:
    """The resource row, created if missing, locked until the transaction ends."""
    locked = Resource.objects.select_for_update().filter(agent_id=agent_id, resource_type=resource_type,
                                                         scope_id=scope_id)
    resource = locked.first()
    if resource is None:
        key = {"agent_id": agent_id, "resource_type": resource_type}
        path = str(files.resource_file_path(**key)) if is_file_backed(resource_type) else ""
        # ON CONFLICT DO NOTHING: a concurrent creator wins quietly and we lock its row instead.
        Resource.objects.bulk_create([Resource(**key, scope_id=scope_id, resource_path=path)], ignore_conflicts=True)
        resource = locked.first()
    return resource


def _current(resource: Resource) -> ResourceRevision | None:
    if not resource.current_revision:
        return None
    return revision_of(**_key(resource), number=resource.current_revision)


def _append(resource: Resource, *, content: str, mutation_source: str, provenance: dict) -> ResourceRevision:
    """Add the next revision and make it current. The caller holds the resource lock."""
    last = ResourceRevision.objects.filter(**_key(resource)).aggregate(last=Max("revision"))["last"] or 0
    revision = ResourceRevision.objects.create(
        **_key(resource),
        revision=last + 1,
        parent_revision=resource.current_revision or None,
        content_hash=content_hash(content),
        content=content,
        byte_size=len(content.encode("utf-8")),
        mutation_source=mutation_source,
        provenance=provenance,
        created_at=timezone.now(),
    )
    resource.current_revision, resource.updated_at = revision.revision, timezone.now()
    Resource.objects.filter(pk=resource.pk).update(current_revision=resource.current_revision,
                                                   updated_at=resource.updated_at)
    if resource.resource_type != ResourceType.CHECKPOINT:
        generations.bump(prompt_generation(resource.agent_id))
    return revision


def _append_if_changed(resource, *, content, mutation_source, provenance,
                       current: ResourceRevision | None = None) -> ResourceRevision | None:
    """A new revision unless `content` is the current one's (`current`: that revision, when known)."""
    current = current or _current(resource)
    # A redacted revision no longer holds its content: the same content again is a new revision.
    if current is not None and current.redacted_at is None and current.content_hash == content_hash(content):
        return None
    return _append(resource, content=content, mutation_source=mutation_source, provenance=provenance)


def resource_commit(
    *,
    agent_id: str,
    resource_type: str,
    content: str,
    mutation_source: str,
    provenance: dict | None = None,
    scope_id: str = GLOBAL_SCOPE,
) -> ResourceRevision | None:
    """Record `content` as the next revision; None when it equals the current revision (a no-op).

    Writes no file: file-backed resources go through `resource_write_file`, checkpoints come here.
    """
    check_agent(agent_id)
    check_type(resource_type)
    scope_id = check_scope(resource_type, scope_id)
    check_source(resource_type, mutation_source)
    check_content(content)
    provenance = check_provenance(provenance)
    with transaction.atomic():
        resource = _lock_resource(agent_id=agent_id, resource_type=resource_type, scope_id=scope_id)
        return _append_if_changed(resource, content=content, mutation_source=mutation_source, provenance=provenance)


# --- file-backed resources --------------------------------------------------------------------------


@dataclass(frozen=True)
class RollbackResult:
    resource_type: str
    target_revision: int | None  # None when the content came from elsewhere (a shipped template)
    from_revision: int
    revision: ResourceRevision | None  # the new `rollback` revision; None when already at the target

    @property
    def already_at_target(self) -> bool:
        return self.revision is None

    @property
    def caveat(self) -> str | None:
        return rollback_caveat(self.resource_type)


class LockedFile:
    """A file-backed resource whose row is locked: its revision and this node's mirror change together."""

    def __init__(self, resource: Resource, path: Path):
        self.resource = resource
        self.path = path
        self.touched = False
        self.previous: bytes | None = None
        self.captured: ResourceRevision | None = None  # the hand edit recorded when the lock was taken
        self._current: tuple[int, ResourceRevision | None] | None = None
        self._record: tuple[bool, str | None] = (False, None)  # (changed, the mirror's record before)

    @property
    def agent_id(self) -> str:
        return self.resource.agent_id

    @property
    def resource_type(self) -> str:
        return self.resource.resource_type

    @property
    def current(self) -> ResourceRevision | None:
        """The current revision, read once per revision number while the lock is held (a new revision
        changes the number)."""
        if self._current is None or self._current[0] != self.resource.current_revision:
            self._current = (self.resource.current_revision, _current(self.resource))
        return self._current[1]

    def _account(self, digest: str) -> None:
        """Record that this node's mirror holds bytes with `digest`, remembering the record before."""
        if not self._record[0]:
            self._record = (True, mirrors.records(self.agent_id).get(self.resource_type))
        mirrors.accounted_for(agent_id=self.agent_id, resource_type=self.resource_type, path=self.path,
                              digest=digest)

    def capture_disk(self, why: str) -> ResourceRevision | None:
        """Record this node's mirror when it was edited by hand (`manual_edit`) or the registry does not
        know the resource yet (`imported`); a mirror that is merely stale is left for the write."""
        data = files.read_bytes(self.path)
        if data is None:
            return None
        digest = files.bytes_hash(data)
        current = self.current
        if current is not None and current.content_hash == digest:
            self._account(digest)
            return None
        if current is not None and not mirrors.is_hand_edit(agent_id=self.agent_id,
                                                            resource_type=self.resource_type, digest=digest):
            return None
        content = files.decode(data)
        try:
            check_content(content)
        except InvalidContent as exc:
            log.warning("not recording %s: %s", self.path, exc.message)
            return None
        source = MutationSource.IMPORTED if current is None else MutationSource.MANUAL_EDIT
        provenance = {"path": str(self.path), "detected_during": why, "node": mirrors.node_name()}
        revision = _append(self.resource, content=content, mutation_source=source, provenance=provenance)
        self._account(digest)
        return revision

    def write(self, content: str, mutation_source: str, provenance: dict) -> ResourceRevision | None:
        revision = _append_if_changed(self.resource, content=content, mutation_source=mutation_source,
                                      provenance=provenance, current=self.current)
        data = content.encode("utf-8")
        with mirrors.mirror_lock(self.agent_id):
            previous = files.read_bytes(self.path)
            if previous != data:
                files.write_atomic(self.path, data)  # on failure the file is untouched: nothing to undo
                if not self.touched:
                    self.touched, self.previous = True, previous
        self._account(files.bytes_hash(data))
        return revision

    def rollback_to(self, content: str, *, target_revision: int | None, provenance: dict) -> RollbackResult:
        """Make `content` current again as a `rollback` revision; nothing new if it already is."""
        current = self.current
        from_revision = current.revision if current else 0
        if current is not None and current.content_hash == content_hash(content):
            self.write(content, MutationSource.ROLLBACK, {})  # no new revision; heals a missing file
            return RollbackResult(self.resource.resource_type, target_revision, from_revision, None)
        recorded = {"from_revision": from_revision}
        if target_revision is not None:
            recorded["target_revision"] = target_revision
        recorded.update(provenance)
        revision = self.write(content, MutationSource.ROLLBACK, recorded)
        return RollbackResult(self.resource.resource_type, target_revision, from_revision, revision)

    def undo(self) -> None:
        """Put the mirror and its record back as they were before this transaction (which failed)."""
        try:
            if self.touched:
                with mirrors.mirror_lock(self.agent_id):
                    files.restore(self.path, self.previous)
            if self._record[0]:
                mirrors.restore_record(agent_id=self.agent_id, resource_type=self.resource_type,
                                       digest=self._record[1])
        except OSError:
            # Never hide the error that caused the undo; the next check records the file as an edit.
            log.exception("could not restore %s after a failed write", self.path)
        mirrors.unsee(self.path)


@contextmanager
def resource_file_locked(*, agent_id: str, resource_type: str, why: str) -> Iterator[LockedFile]:
    """Lock a file-backed resource for one transaction and yield it for writing.

    Any hand edit on disk is recorded first, so no edit is lost. If the block raises, or the commit
    fails, the file is put back as it was. Use it outermost: inside a caller's transaction the commit
    happens later, out of reach of the file's undo (a later load then records the file as an edit).
    """
    path = files.resource_file_path(agent_id=agent_id, resource_type=resource_type)
    locked = None
    try:
        with transaction.atomic():
            resource = _lock_resource(agent_id=agent_id, resource_type=resource_type, scope_id=GLOBAL_SCOPE)
            locked = LockedFile(resource, path)
            locked.captured = locked.capture_disk(why)
            yield locked
    except BaseException:
        # The transaction rolled back (or its COMMIT failed): the file goes back to what it was.
        if locked is not None:
            locked.undo()
        raise


def _check_file_write(agent_id, resource_type, content, mutation_source, provenance) -> dict:
    check_agent(agent_id)
    check_type(resource_type)
    if not is_file_backed(resource_type):
        raise InvalidContent(f"{resource_type} is not backed by a file; use resource_commit")
    check_source(resource_type, mutation_source)
    check_content(content)
    return check_provenance(provenance)


def resource_write_file(
    *,
    agent_id: str,
    resource_type: str,
    content: str,
    mutation_source: str,
    provenance: dict | None = None,
) -> ResourceRevision | None:
    """Write a prompt file atomically and record it as a revision; None when the content is unchanged.

    A hand edit found on disk is recorded first (manual_edit, or imported when the file was unknown),
    so the history keeps it. When the content equals the current revision but the file on disk differs
    or is missing, the file is rewritten to match and no revision is added.
    """
    provenance = _check_file_write(agent_id, resource_type, content, mutation_source, provenance)
    with resource_file_locked(agent_id=agent_id, resource_type=resource_type, why=mutation_source) as locked:
        return locked.write(content, mutation_source, provenance)


def resource_capture_file(*, agent_id: str, resource_type: str, why: str = "read") -> ResourceRevision | None:
    """Record the file on disk if it has no revision yet (imported) or differs from the current one
    (manual_edit). Returns the new revision, or None when the registry already matches the file."""
    check_agent(agent_id)
    if not is_file_backed(check_type(resource_type)):
        raise InvalidContent(f"{resource_type} is not backed by a file")
    with resource_file_locked(agent_id=agent_id, resource_type=resource_type, why=why) as locked:
        return locked.captured


def resource_sync_files(*, agent_id: str, types: tuple[str, ...] | None = None, why: str = "sync",
                        current: dict[str, ResourceRevision] | None = None) -> list[ResourceRevision]:
    """Bring this node's mirrors in line with the database: record each mirror edited by hand on this
    node (or never recorded) as a revision, then rewrite each mirror that differs from its current
    revision. Returns the revisions it recorded. `current`: the current revisions, when just read.

    Costs one query and a read and a hash per file when nothing changed; the lock is taken only for a
    hand edit.
    """
    check_agent(agent_id)
    types = tuple(FILE_NAMES) if types is None else tuple(types)
    if current is None:
        current = resource_current_revisions(agent_id=agent_id, types=types)
    known = mirrors.records(agent_id)
    recorded = []
    for resource_type in types:
        path = files.resource_file_path(agent_id=agent_id, resource_type=resource_type)
        data = files.read_bytes(path)
        revision = current.get(resource_type)
        if data is not None:
            digest = files.bytes_hash(data)
            if revision is not None and revision.content_hash == digest and revision.redacted_at is None:
                if known.get(resource_type) != digest:
                    mirrors.accounted_for(agent_id=agent_id, resource_type=resource_type, path=path, digest=digest)
                else:
                    mirrors.seen(path)
                continue
            if revision is None or mirrors.is_hand_edit(agent_id=agent_id, resource_type=resource_type,
                                                        digest=digest):
                captured = resource_capture_file(agent_id=agent_id, resource_type=resource_type, why=why)
                if captured is not None:
                    recorded.append(captured)
                    continue
        if revision is not None and revision.redacted_at is None:
            mirrors.write_mirror(agent_id=agent_id, resource_type=resource_type, content=revision.content)
    return recorded


def resource_sync_changed(*, agent_id: str, why: str = "sync") -> list[ResourceRevision]:
    """`resource_sync_files` for the mirrors this process has not seen at their present size, time and
    inode: a stat per file when nothing changed (on every compose)."""
    changed = mirrors.changed_since_seen(agent_id)
    return resource_sync_files(agent_id=agent_id, types=tuple(changed), why=why) if changed else []


def resource_seed_file(
    *, agent_id: str, resource_type: str, content: str, provenance: dict | None = None
) -> tuple[bool, ResourceRevision | None]:
    """Write a file as a `seed` revision only if the resource has no revision and no file yet; what
    exists is kept as is (a node added later mirrors the current revision instead).

    Returns (written, revision). An existing file without a record is recorded as `imported`.
    """
    provenance = _check_file_write(agent_id, resource_type, content, MutationSource.SEED, provenance)
    with resource_file_locked(agent_id=agent_id, resource_type=resource_type, why="seed") as locked:
        current = locked.current
        if current is not None:
            if not locked.path.exists() and current.redacted_at is None:
                locked.write(current.content, MutationSource.SEED, provenance)  # the mirror; no revision
            return False, None
        if locked.path.exists():
            return False, None
        return True, locked.write(content, MutationSource.SEED, provenance)


# --- rollback ---------------------------------------------------------------------------------------


def resource_rollback(*, agent_id: str, resource_type: str, revision: int, provenance: dict | None = None
                      ) -> RollbackResult:
    """Make an earlier revision's content current again, as a new `rollback` revision, and rewrite the file.

    Rolling back to content identical to the current revision writes nothing (`already_at_target`).
    Checkpoints are audit records and cannot be rolled back. `provenance` adds to the recorded
    from/target revisions (for example the proposal that asked for it).
    """
    check_agent(agent_id)
    check_type(resource_type)
    if resource_type == ResourceType.CHECKPOINT:
        raise CheckpointRollback("checkpoint revisions are audit and history records only; they cannot be rolled back")
    extra = check_provenance(provenance)
    if not Resource.objects.filter(agent_id=agent_id, resource_type=resource_type).exists():
        raise UnknownResource(f"{resource_type} has no revisions for agent {agent_id}")
    with resource_file_locked(agent_id=agent_id, resource_type=resource_type, why="rollback") as locked:
        target = _revision(agent_id=agent_id, resource_type=resource_type, number=revision)
        if target.redacted_at is not None:
            raise RedactedRevision(f"{resource_type} revision {revision} was redacted (its owner was erased); "
                                   "it cannot be restored")
        return locked.rollback_to(target.content, target_revision=target.revision, provenance=extra)


def _revision(*, agent_id, resource_type, number) -> ResourceRevision:
    found = revision_of(agent_id=agent_id, resource_type=resource_type, scope_id=GLOBAL_SCOPE, number=number)
    if found is None:
        raise UnknownRevision(f"{resource_type} has no revision {number} for agent {agent_id}")
    return found


def resource_sync_every_agent() -> None:
    """The node heartbeat's part for prompt files (`fermix_site.node`): every agent's mirrors on this
    node in line with the database, and its hand edits recorded."""
    for agent_id in resource_agents():
        resource_sync_files(agent_id=agent_id, why="heartbeat")
