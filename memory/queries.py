"""Memory's hand-written statements: what the ORM cannot say, each once.

The search passes and the FTS5 mirrors' maintenance have their own modules (`memory.search`,
`memory.fts`); the statements here read the database's own catalogue for the system checks.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

SEARCH_TABLES = ("messages", "memories")


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
