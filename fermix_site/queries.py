"""The site's hand-written statements: what the ORM cannot say, each once, on SQLite and PostgreSQL."""

from __future__ import annotations

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from fermix_site.models import Generation

_GENERATIONS = Generation._meta.db_table


def generation_bump(connection: BaseDatabaseWrapper, name: str) -> int:
    """Add one to a named generation, creating it at 1, in one statement (the ORM has no upsert that
    returns the new value); call inside the writing transaction."""
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {_GENERATIONS} (name, value) VALUES (%s, 1) "
                       f"ON CONFLICT (name) DO UPDATE SET value = {_GENERATIONS}.value + 1 RETURNING value", [name])
        return cursor.fetchone()[0]


def database_answers(connection: BaseDatabaseWrapper) -> None:
    """A round trip to the database; raises DatabaseError when it does not answer."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def table_estimate(connection: BaseDatabaseWrapper, table: str) -> int:
    """Rows in a table, estimated without reading it: PostgreSQL's planner statistics, else the highest id
    (for tables whose rows are never deleted, close to the count). 0 when the table cannot be read."""
    try:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [table])
                row = cursor.fetchone()
                if row and row[0] and row[0] > 0:
                    return int(row[0])
            cursor.execute(f"SELECT MAX(id) FROM {connection.ops.quote_name(table)}")
            row = cursor.fetchone()
            return int(row[0] or 0)
    except DatabaseError:
        return 0
