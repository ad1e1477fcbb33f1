"""What each resource type is and which writes it accepts: the checks every service runs first."""

from __future__ import annotations

import hashlib
import json

from fermix_site.conf import valid_id
from resources.errors import (
    InvalidAgent,
    InvalidContent,
    InvalidMutationSource,
    InvalidScope,
    UnknownScope,
    UnknownType,
)
from resources.models import GLOBAL_SCOPE, MutationSource, ResourceType

T = ResourceType
S = MutationSource

# Plain strings as keys, in prompt order, so callers can compare and serialise them freely.
BOOTSTRAP_FILES = {"identity_md": "IDENTITY.md", "fermix_md": "FERMIX.md", "soul_md": "SOUL.md",
                   "realtime_md": "REALTIME.md"}
MEMORY_FILES = {"user_md": "USER.md", "memory_md": "MEMORY.md"}
FILE_NAMES = {**BOOTSTRAP_FILES, **MEMORY_FILES}
TYPE_NAMES = tuple(T.values)

# Which mutation sources make sense for which type: a compaction never writes SOUL.md, a memory rebuild
# never writes a checkpoint. Refusing the odd pairs keeps the audit trail truthful.
_FILE_SOURCES = {S.SEED, S.IMPORTED, S.MANUAL_EDIT, S.ROLLBACK}
ALLOWED_SOURCES = {
    T.IDENTITY_MD: _FILE_SOURCES,
    T.FERMIX_MD: _FILE_SOURCES,
    T.REALTIME_MD: _FILE_SOURCES,
    T.SOUL_MD: _FILE_SOURCES | {S.SOUL_CURATION},
    T.USER_MD: _FILE_SOURCES | {S.EXTRACTION_REBUILD, S.SCHEDULER_REBUILD},
    T.MEMORY_MD: _FILE_SOURCES | {S.EXTRACTION_REBUILD, S.SCHEDULER_REBUILD},
    T.CHECKPOINT: {S.COMPACTION},
}

# One caveat, shown wherever USER.md or MEMORY.md can be rolled back (command, API, admin).
DERIVED_ROLLBACK_CAVEAT = (
    "Note: {name} is rebuilt from promoted memory rows. The next memory rebuild regenerates it from "
    "those rows and can overwrite this rollback. To make it stick, edit or archive the memories that "
    "produced the unwanted content, then rebuild."
)


def rollback_caveat(resource_type: str) -> str | None:
    """The warning to show with a rollback of a memory-derived file, or None for other types."""
    name = MEMORY_FILES.get(resource_type)
    return DERIVED_ROLLBACK_CAVEAT.format(name=name) if name else None


def content_hash(content: str) -> str:
    """SHA-256 of the exact bytes written to disk (UTF-8, newlines untouched)."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def is_file_backed(resource_type: str) -> bool:
    return resource_type in FILE_NAMES


def display_name(resource_type: str) -> str:
    return FILE_NAMES.get(resource_type, resource_type)


def check_agent(agent_id: str) -> str:
    if not valid_id(agent_id):
        raise InvalidAgent(f"agent id {agent_id!r} is invalid: use 1-64 of A-Z a-z 0-9 _ . - (not '.' or '..')")
    return agent_id


def check_type(resource_type: str) -> str:
    if resource_type not in TYPE_NAMES:
        raise UnknownType(f"unknown resource type {resource_type!r}; known types: {', '.join(TYPE_NAMES)}")
    return resource_type


def check_scope(resource_type: str, scope_id: str | None) -> str:
    """The stored scope: "global" for files, the full conversation key for checkpoints."""
    if resource_type != T.CHECKPOINT:
        if scope_id not in (None, "", GLOBAL_SCOPE):
            raise UnknownScope(f"{resource_type} has a single global scope; --scope is for checkpoint only")
        return GLOBAL_SCOPE
    if not scope_id or scope_id == GLOBAL_SCOPE:
        raise UnknownScope("checkpoint resources are per conversation: give the conversation key "
                           "(for example --scope telegram:123456789)")
    if ":" not in scope_id or any(ch.isspace() for ch in scope_id) or len(scope_id) > 600:
        raise InvalidScope(f"{scope_id!r} is not a conversation key <channel>:<chat_id>[:<thread_scope>]")
    # `telegram:123` and `telegram:123:root` name the same conversation (the thread defaults to root).
    return scope_id if scope_id.count(":") >= 2 else f"{scope_id}:root"


def check_source(resource_type: str, mutation_source: str) -> str:
    if mutation_source not in S.values:
        raise InvalidMutationSource(
            f"unknown mutation_source {mutation_source!r}; allowed: {', '.join(S.values)}")
    if mutation_source not in ALLOWED_SOURCES[resource_type]:
        allowed = ", ".join(s for s in S.values if s in ALLOWED_SOURCES[resource_type])
        raise InvalidMutationSource(f"{resource_type} cannot be written by {mutation_source!r} (allowed: {allowed})")
    return mutation_source


def check_content(content: str) -> str:
    if not isinstance(content, str):
        raise InvalidContent(f"content must be text, got {type(content).__name__}")
    if "\x00" in content:
        raise InvalidContent("content contains a NUL character, which the database cannot store")
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidContent("content is not valid Unicode text (it has a lone surrogate)") from None
    return content


def check_provenance(provenance: dict | None) -> dict:
    if provenance is None:
        return {}
    if not isinstance(provenance, dict):
        raise InvalidContent(f"provenance must be a JSON object, got {type(provenance).__name__}")
    try:
        json.dumps(provenance)
    except (TypeError, ValueError) as exc:
        raise InvalidContent(f"provenance must be JSON: {exc}") from None
    return provenance
