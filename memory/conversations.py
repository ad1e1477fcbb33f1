"""The conversation store: append messages, read the current window, clear it.

SQLite is the source of truth. The window of each conversation is kept in a process-local hot cache
that is written through on append and checked against the conversation's generation counter on every
read, so another process's append, clear or compaction is seen at once.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from django.db import OperationalError, transaction
from django.utils import timezone

from fermix_site import generations
from fermix_site.conf import conf, valid_id
from memory import queries
from memory.errors import CodedError
from memory.models import ChatType, Conversation, Message, Role, Trust
from memory.vectors import EMBEDDED_KINDS, queue_embedding

logger = logging.getLogger("fermix.memory")

APPEND_ATTEMPTS = 3
APPEND_BACKOFF_S = 0.05
KINDS = {"chat", "voice_turn", "checkpoint", "notice", "tool"}
ROLES, TRUSTS = frozenset(Role.values), frozenset(Trust.values)
MAX_CONTENT_BYTES = 512 * 1024
MAX_CLOCK_AHEAD = timedelta(minutes=5)  # a backfilled `created_at` may be this far past our clock, no more

# A chat id or thread: no ':', '/', '\\', white space or control character, not '.' or '..'. Written so that
# Python and the OpenAPI document's (JavaScript) regular expressions read it the same: \x85 and \ufeff
# are named because the two \s differ on them.
_PART = r"(?!\.\.?(?::|$))[^\s:/\\\x00-\x1f\x7f\x85\ufeff]{1,256}"
KEY_PATTERN = rf"^[A-Za-z0-9_.-]{{1,64}}:{_PART}(?::{_PART})?$"
KEY_RE = re.compile(KEY_PATTERN)

_window_cache = generations.local_cache(max_entries=4096)

T = TypeVar("T")


class ConversationError(CodedError):
    """Invalid input to the conversation store; `code` names the problem for API errors."""


@dataclass(frozen=True)
class ConversationKey:
    channel: str
    chat_id: str
    thread_scope: str = "root"

    def __str__(self) -> str:
        return f"{self.channel}:{self.chat_id}:{self.thread_scope}"

    @classmethod
    def parse(cls, text: str | ConversationKey) -> ConversationKey:
        """`telegram:12345` is `telegram:12345:root`; parts may not hold `:`, `/`, `\\` or spaces."""
        if isinstance(text, ConversationKey):
            return text
        if not isinstance(text, str) or not KEY_RE.fullmatch(text):
            raise ConversationError(
                "invalid_conversation",
                f"conversation key {text!r} is invalid: use <channel>:<chat_id>[:<thread_scope>] "
                "(channel of A-Z a-z 0-9 _ . -; no ':', '/', '\\', spaces, '.' or '..' as parts)",
            )
        parts = text.split(":")
        return cls(*parts, *(["root"] if len(parts) == 2 else []))

    def filter(self) -> dict:
        return {"channel": self.channel, "chat_id": self.chat_id, "thread_scope": self.thread_scope}

    @property
    def source_key(self) -> str:
        """The key of the conversation's memory source (`MemorySource.key`)."""
        return f"conversation:{self}"


def generation_name(agent_id: str, key: ConversationKey) -> str:
    return f"conv:{agent_id}:{key}"


def _check_agent(agent_id: str) -> None:
    if not valid_id(agent_id):
        raise ConversationError("invalid_agent", f"agent id {agent_id!r} is invalid: use 1-64 of A-Z a-z 0-9 _ . -")


def _validate(role: str, content: str, kind: str, trust: str, owner_id: str) -> None:
    if role not in ROLES:
        raise ConversationError("invalid_role", f"role must be one of {', '.join(Role.values)}, got {role!r}")
    if kind not in KINDS:
        raise ConversationError("invalid_kind", f"kind must be one of {', '.join(sorted(KINDS))}, got {kind!r}")
    if trust not in TRUSTS:
        raise ConversationError("invalid_trust", f"trust must be operator or guest, got {trust!r}")
    if not valid_id(owner_id):
        raise ConversationError("invalid_owner", f"owner id {owner_id!r} is invalid: use 1-64 of A-Z a-z 0-9 _ . -")
    if not isinstance(content, str) or "\x00" in content:
        raise ConversationError("invalid_content", "content must be text without NUL characters")
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate; the size check still comes first
        size, valid = len(content.encode("utf-8", "surrogatepass")), False
    else:
        valid = True
    if size > MAX_CONTENT_BYTES:
        raise ConversationError("content_too_large", f"content is over {MAX_CONTENT_BYTES // 1024} KiB")
    if not valid:
        raise ConversationError("invalid_content", "content is not valid UTF-8 text")


def conversation_get_or_create(*, agent_id: str, key: ConversationKey, owner_id: str | None = None) -> Conversation:
    """Call inside a transaction; returns the conversation row, creating it on first use."""
    conversation, _ = Conversation.objects.get_or_create(
        agent_id=agent_id,
        key=str(key),
        defaults={**key.filter(), "owner_id": owner_id or conf.memory.owner_id},
    )
    return conversation


def _is_lock_error(exc: OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def message_append(
    *,
    agent_id: str,
    conversation: str | ConversationKey,
    role: str,
    content: str,
    owner_id: str | None = None,
    sender: str = "",
    trust: str = Trust.GUEST,
    kind: str = "chat",
    metadata: dict | None = None,
    created_at: datetime | None = None,
    chat_type: str | None = None,
    also: Callable[[Message], None] | None = None,
) -> Message:
    """Store one message durably. A locked database is retried (3 attempts, short backoff), then raised.

    `also(message)` runs inside the append's transaction, after the insert: what it writes commits with
    the message or not at all (an idempotency record), and an error it raises stores nothing.

    `created_at` backfills history: an aware time, not before the conversation's newest message (the
    window is in time order) and at most five minutes past now. Default: now.

    `chat_type` (direct, group, channel), when given, becomes the conversation's (`chat_type_set`).
    """
    key = ConversationKey.parse(conversation)
    owner_id = owner_id or conf.memory.owner_id
    _check_agent(agent_id)
    _validate(role, content, kind, trust, owner_id)
    _check_chat_type(chat_type)
    if created_at is not None:
        _check_time(created_at)
        created_at = created_at.astimezone(UTC)
    fields = dict(
        agent_id=agent_id, owner_id=owner_id, sender=sender[:256], role=role, kind=kind, trust=trust,
        content=content, metadata=metadata or {}, created_at=created_at, **key.filter(),
    )
    def then(message: Message) -> None:
        if chat_type is not None:
            chat_type_set(agent_id=agent_id, key=key, chat_type=chat_type)
        if also is not None:
            also(message)

    return retry_when_locked(lambda: _append_once(agent_id, key, fields, then), f"message append on {agent_id}/{key}")


def _check_chat_type(chat_type: str | None) -> None:
    if chat_type is not None and chat_type not in ChatType.values:
        raise ConversationError("invalid_chat_type", f"chat_type must be one of {', '.join(ChatType.values)}, "
                                                     f"got {chat_type!r}")


def chat_type_set(*, agent_id: str, key: ConversationKey, chat_type: str) -> None:
    """The conversation's chat type as a message, commit or turn states it (the latest statement wins);
    one UPDATE, only when it changes. The conversation must exist."""
    _check_chat_type(chat_type)
    Conversation.objects.filter(agent_id=agent_id, key=str(key)).exclude(chat_type=chat_type).update(
        chat_type=chat_type)


def chat_type_of(*, agent_id: str, key: ConversationKey) -> str:
    """The conversation's chat type; `direct` for a conversation not seen yet."""
    found = Conversation.objects.filter(agent_id=agent_id, key=str(key)).values_list("chat_type", flat=True).first()
    return found or ChatType.DIRECT


def retry_when_locked(write: Callable[[], T], what: str) -> T:
    """Run `write` (one short transaction); a locked database is retried (3 attempts, short backoff)."""
    for attempt in range(1, APPEND_ATTEMPTS + 1):
        try:
            return write()
        except OperationalError as exc:
            if not _is_lock_error(exc) or attempt == APPEND_ATTEMPTS:
                logger.error("%s failed after %d attempt(s): %s", what, attempt, exc)
                raise
            logger.warning("database locked during %s (attempt %d); retrying", what, attempt)
            time.sleep(APPEND_BACKOFF_S * attempt)
    raise AssertionError("unreachable")


def _check_time(created_at: datetime) -> None:
    if not isinstance(created_at, datetime) or timezone.is_naive(created_at):
        raise ConversationError("invalid_created_at", "created_at must be an ISO 8601 time with its offset")
    if created_at > timezone.now() + MAX_CLOCK_AHEAD:
        raise ConversationError("created_at_in_future", "created_at is more than 5 minutes in the future")


def _check_order(agent_id: str, key: ConversationKey, created_at: datetime) -> None:
    """Call inside the append's transaction: the conversation's messages stay in time order."""
    newest = (Message.objects.filter(agent_id=agent_id, **key.filter()).order_by("-created_at", "-id")
              .values_list("created_at", flat=True).first())
    if newest is not None and created_at < newest:
        raise ConversationError("created_at_out_of_order",
                                f"created_at {created_at.isoformat()} is before the conversation's newest message "
                                f"({newest.isoformat()}): backfill in order, oldest first")


def _append_once(agent_id: str, key: ConversationKey, fields: dict, also: Callable[[Message], None] | None) -> Message:
    name = generation_name(agent_id, key)
    with transaction.atomic():
        # An index probe on every append; the get_or_create (a whole row read) only the first time.
        if not queries.conversation_exists(agent_id, str(key)):
            conversation_get_or_create(agent_id=agent_id, key=key, owner_id=fields["owner_id"])
        if fields["created_at"] is not None:
            _check_order(agent_id, key, fields["created_at"])
        message = queries.insert_message(Message(**{**fields, "created_at": fields["created_at"] or timezone.now()}))
        new_generation = generations.bump(name)[name]
        if message.kind in EMBEDDED_KINDS:
            queue_embedding()
        if also is not None:
            also(message)
        transaction.on_commit(lambda: _write_through(agent_id, key, message, new_generation))
    return message


def _write_through(agent_id: str, key: ConversationKey, message: Message, new_generation: int) -> None:
    """Extend this process's cached window if it was exactly one generation behind; else drop it."""
    cache_key = (agent_id, str(key))
    found, window = _window_cache.get(cache_key, (new_generation - 1,))
    if found and message.kind != "checkpoint":
        _window_cache.put(cache_key, (new_generation,), window + (message,))
    else:
        _window_cache.discard(cache_key)


def _load_window(agent_id: str, key: ConversationKey) -> tuple[Message, ...]:
    """The whole current window: pinned system messages, the latest checkpoint summary, then every
    message after the window start (the newest `max_conversation_history` of them when that is set)."""
    loaded = queries.window_load(agent_id, key)
    if loaded is None:
        return ()
    window, found = loaded
    pinned_ids, start = sorted(window.pinned_ids), window.start_id
    head = {m.id: m for m in found}
    rows = sorted((m for m in found if m.id >= start and m.kind != "checkpoint"), key=lambda m: (m.created_at, m.id))
    bound = conf.memory.max_conversation_history
    if bound is not None:
        rows = rows[-bound:]
    checkpoint = head.get(window.checkpoint_id)
    return tuple(head[i] for i in pinned_ids if i in head) + ((checkpoint,) if checkpoint else ()) + tuple(rows)


def window_read(*, agent_id: str, conversation: str | ConversationKey, limit: int | None = None) -> list[Message]:
    """The current window, oldest first: the newest `limit` messages (and no more than
    `max_conversation_history`), after the latest checkpoint, which comes first when present."""
    key = ConversationKey.parse(conversation)
    _check_agent(agent_id)
    if limit is not None and limit < 1:
        raise ConversationError("invalid_limit", "limit must be a positive whole number")
    window = _window_cache.read_through(
        (agent_id, str(key)), [generation_name(agent_id, key)], lambda: _load_window(agent_id, key)
    )
    bound = conf.memory.max_conversation_history
    if bound is not None and len(window) > bound:
        window = window[-bound:]
    if limit is not None:
        window = window[-limit:]
    return list(window)


def window_clear(*, agent_id: str, conversation: str | ConversationKey) -> int:
    """`/new`, `/clear`: the window starts after the newest message. Nothing is deleted.

    Returns how many messages left the window. Long-term memory, revisions and jobs are untouched.
    """
    key = ConversationKey.parse(conversation)
    _check_agent(agent_id)
    name = generation_name(agent_id, key)
    with transaction.atomic():
        conversation_row = conversation_get_or_create(agent_id=agent_id, key=key)
        in_window = Message.objects.filter(agent_id=agent_id, id__gte=conversation_row.window_start_id, **key.filter())
        left = in_window.exclude(kind="checkpoint").count()
        newest = in_window.order_by("-id").values_list("id", flat=True).first()
        if newest is not None:
            conversation_row.window_start_id = newest + 1
        conversation_row.checkpoint_message = None
        conversation_row.pinned_message_ids = []
        conversation_row.last_peak_prompt_tokens = None
        conversation_row.save(update_fields=["window_start_id", "checkpoint_message", "pinned_message_ids",
                                             "last_peak_prompt_tokens", "updated_at"])
        generations.bump(name)
    return left
