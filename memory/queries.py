"""Memory's hand-written statements: what the ORM cannot say, each once.

The search passes and the FTS5 mirrors' maintenance have their own modules (`memory.search`,
`memory.fts`). The statements here read the database's own catalogue for the system checks, and run
the three hot paths where the ORM measurably missed its budget: the append, the window load, and a prompt
file's section rows.
"""

from __future__ import annotations

from typing import NamedTuple

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper

from memory import days
from memory.models import Conversation, Memory, Message

SEARCH_TABLES = ("messages", "memories", days.TABLE)


def journal_mode(connection: BaseDatabaseWrapper) -> list[tuple[str]]:
    """SQLite: the journal mode, as one row."""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        return cursor.fetchall()


def search_indexes(connection: BaseDatabaseWrapper) -> list[tuple[str, str]]:
    """PostgreSQL: (table, index) for every index of the searched tables in the current schema."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename, indexname FROM pg_indexes WHERE schemaname = current_schema() "
                       "AND tablename = ANY(%s)", [list(SEARCH_TABLES)])
        return cursor.fetchall()


def message_triggers(connection: BaseDatabaseWrapper) -> list[tuple[str]]:
    """PostgreSQL: the name of every trigger of `messages` that is not the system's own."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass('messages') "
                       "AND NOT tgisinternal")
        return cursor.fetchall()


# --- the hot paths: each statement here measured against its ORM form in `make bench` (docs/performance.md)

_MESSAGES, _CONVERSATIONS = Message._meta.db_table, Conversation._meta.db_table
_INSERTED = [field for field in Message._meta.concrete_fields if not field.primary_key]
_INSERT_MESSAGE = 'INSERT INTO "{}" ({}) VALUES ({}) RETURNING "id"'.format(
    _MESSAGES, ", ".join(f'"{field.column}"' for field in _INSERTED), ", ".join(["%s"] * len(_INSERTED)))


def conversation_exists(agent_id: str, key: str) -> bool:
    """Every append probes for its conversation: one index lookup (the ORM's `exists()` cost more to build)."""
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT 1 FROM "{_CONVERSATIONS}" WHERE "agent_id" = %s AND "key" = %s', [agent_id, key])
        return cursor.fetchone() is not None


def insert_message(message: Message) -> Message:
    """INSERT one message and set its id, the values prepared by their fields as the ORM prepares them
    (`pre_save`, `get_db_prep_save`). The ORM's building of this INSERT cost more than running it, on
    every append; no model signal is sent (none is connected to Message)."""
    values = [field.get_db_prep_save(field.pre_save(message, True), connection) for field in _INSERTED]
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_MESSAGE, values)
        message.pk = cursor.fetchone()[0]
    message._state.adding, message._state.db = False, connection.alias
    return message


class WindowHead(NamedTuple):
    """What a conversation's row says about its window."""

    start_id: int
    checkpoint_id: int | None
    pinned_ids: list[int]


_PINNED = Conversation._meta.get_field("pinned_message_ids")
_MESSAGE_FIELDS = Message._meta.concrete_fields
_MESSAGE_COLUMNS = ", ".join(f'"{field.column}"' for field in _MESSAGE_FIELDS)
_WINDOW = (f'SELECT {_MESSAGE_COLUMNS} FROM "{_MESSAGES}" WHERE ("agent_id" = %s AND "channel" = %s '
           'AND "chat_id" = %s AND "thread_scope" = %s AND "id" >= %s AND "kind" <> %s)')


def window_load(agent_id: str, key) -> tuple[WindowHead, list[Message]] | None:
    """A conversation's window head and its messages from the window start on (checkpoints left out)
    with the pinned messages and the checkpoint, in no order; None when there is no conversation.

    Two statements, the second served by `messages_window_idx` from the window's start. Every uncached
    window read runs this; the ORM's building of the conversation query and its instances for ~50 rows
    cost three times the statements (docs/performance.md), so the rows are converted by the fields' own
    database converters and made into instances with `Message.from_db`."""
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT "window_start_id", "checkpoint_message_id", "pinned_message_ids" FROM '
                       f'"{_CONVERSATIONS}" WHERE "agent_id" = %s AND "key" = %s', [agent_id, str(key)])
        found = cursor.fetchone()
        if found is None:
            return None
        head = WindowHead(found[0], found[1], list(_PINNED.from_db_value(found[2], None, connection) or []))
        head_ids = [*head.pinned_ids, *([head.checkpoint_id] if head.checkpoint_id else [])]
        sql, params = _WINDOW, [agent_id, key.channel, key.chat_id, key.thread_scope, head.start_id, "checkpoint"]
        if head_ids:
            sql += f' OR "id" IN ({", ".join(["%s"] * len(head_ids))})'
            params += head_ids
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return head, [Message.from_db(connection.alias, None, values) for values in _converted(rows)]


def _converted(rows: list[tuple]) -> list[list]:
    """The rows' values as the ORM would hand them to the model: each field's converters, the
    database's (SQLite's text datetimes made aware) and the field's own (JSON decoded), applied in order."""
    converters = []
    for index, field in enumerate(_MESSAGE_FIELDS):
        functions = connection.ops.get_db_converters(field.get_col(_MESSAGES)) + field.get_db_converters(connection)
        if functions:
            converters.append((index, field, functions))
    out = []
    for row in rows:
        values = list(row)
        for index, field, functions in converters:
            for function in functions:
                values[index] = function(values[index], field, connection)
        out.append(values)
    return out


class SectionRow(NamedTuple):
    """The columns a prompt file's rendering reads of a row."""

    id: int
    category: str
    value: str
    updated_at: object  # as the database returns it; only compared with the other rows' values


def file_rows(agent_id: str, owner_id: str, sections) -> list[SectionRow]:
    """Each section's newest `cap` live rows of the owner, in one statement (a rebuild runs it after every
    review; the ORM's one query per section took the rebuild past its budget). Each section is its own
    subquery, so the partial index `memories_render_idx` answers it."""
    parts, params = [], []
    for index, section in enumerate(sections):
        scopes = ", ".join(["%s"] * len(section.scopes))
        parts.append(f'SELECT * FROM (SELECT "id", "category", "value", "updated_at" FROM "{Memory._meta.db_table}" '
                     f'WHERE "agent_id" = %s AND "owner_id" = %s AND "archived_at" IS NULL AND "category" = %s '
                     f'AND "scope_type" IN ({scopes}) ORDER BY "updated_at" DESC, "id" DESC LIMIT %s) AS s{index}')
        params += [agent_id, owner_id, str(section.category), *map(str, section.scopes), section.cap]
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), params)
        return [SectionRow(*row) for row in cursor.fetchall()]
