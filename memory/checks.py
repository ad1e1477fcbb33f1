"""System checks with stable ids; `doctor` runs the same functions."""

from django.core.checks import Error, Warning, register
from django.db import DatabaseError, connections

from memory import days, fts, queries


def _connection():
    return connections["default"]


@register()
def check_fts_triggers(app_configs=None, **kwargs):
    try:
        missing = fts.missing_triggers(_connection())
    except DatabaseError:
        return []  # no database yet: `migrate` creates it, with the mirrors
    if not missing:
        return []
    return [
        Error(
            f"FTS triggers missing: {', '.join(missing)}. Full-text search no longer mirrors the tables.",
            hint="Run `python manage.py rebuild_search_index` to re-create them and rebuild the index.",
            id="memory.E001",
        )
    ]


def _rows(vendor: str, query) -> list[tuple] | None:
    """The rows `query(connection)` reads on the default database when it is `vendor`; None otherwise, or
    when there is no database yet (a check before `migrate` has nothing to say)."""
    connection = _connection()
    if connection.vendor != vendor:
        return None
    try:
        return query(connection)
    except DatabaseError:
        return None


@register()
def check_wal(app_configs=None, **kwargs):
    rows = _rows("sqlite", queries.journal_mode)
    if not rows:
        return []
    mode = rows[0][0]
    if mode.lower() == "wal":
        return []
    return [
        Warning(
            f"SQLite journal_mode is {mode}, not WAL: readers and the writer will block each other.",
            hint="Fermix sets WAL on connect; check that the database file's folder is writable.",
            id="memory.W001",
        )
    ]


POSTGRES_SEARCH_INDEXES = ("messages_search_idx", "memories_search_idx", "messages_chat_search_idx",
                           "messages_span_brin", "messages_owner_search_idx")


@register()
def check_search_indexes(app_configs=None, **kwargs):
    """PostgreSQL: the indexes recall relies on (migrations 0004, 0008, 0014 and 0016) are present (memory.W002),
    and the trigger that keeps `message_days` (migration 0015, memory.E002)."""
    rows = _rows("postgresql", queries.search_indexes)
    if not rows or not {table for table, _ in rows} >= {"messages", "memories"}:
        return []  # not migrated yet
    missing = [name for name in POSTGRES_SEARCH_INDEXES if name not in {index for _, index in rows}]
    warnings = []
    if missing:
        warnings.append(Warning(
            f"Search indexes missing: {', '.join(missing)}. Recall stays correct but reads far more rows.",
            hint="Run `python manage.py migrate`; messages_chat_search_idx and messages_owner_search_idx need "
                 "the btree_gin extension (`CREATE EXTENSION btree_gin` as the database owner), then "
                 "`migrate memory 0007` and `migrate memory` to create them.",
            id="memory.W002",
        ))
    triggers = {name for (name,) in _rows("postgresql", queries.message_triggers) or []}
    if days.TABLE in {table for table, _ in rows} and f"{days.TABLE}_note" not in triggers:
        warnings.append(Error(
            f"The trigger {days.TABLE}_note on messages is missing: recall of a time span can miss messages "
            "written since.",
            hint="Run `python manage.py rebuild_search_index` to re-create it and refill message_days.",
            id="memory.E002",
        ))
    return warnings
