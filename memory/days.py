"""Which ids each day's messages of an agent lie between (`message_days`), kept by the database itself.

Recall narrows a query to a time span ("in March 2025", `after`/`before`), and the indexes walk message
ids, newest first. Ids follow time within a conversation (a backfill is in order), but not across an
agent's conversations: a conversation backfilled today holds last year's messages under today's ids.
So a span's ids come from this table, one row per agent and UTC day: the lowest and highest id of the
day's messages, widened to whole blocks of BLOCK ids so that a row changes once per block rather than on
every insert (on PostgreSQL, concurrent appends of one agent would otherwise queue on that row).

A trigger on `messages` keeps it, on insert and when a message's agent or time changes, so every way a
message is written (the service, a backfill, an import, SQL by hand) is covered. Removals leave the
bounds as they are: wider than needed is still right. On SQLite, a table rebuild by a migration drops the
triggers with the table; the FTS guard (`memory.fts`: memory.E001, `rebuild_search_index`, the
post_migrate repair) re-creates them and refills the table from `messages`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

BLOCK = 256
TABLE = "message_days"

_SQLITE_DAY = "substr(new.created_at, 1, 10)"  # stored as naive UTC text, `YYYY-MM-DD HH:MM:SS…`
_SQLITE_NOTE = (
    f"INSERT INTO {TABLE}(agent_id, day, first_id, last_id) VALUES (new.agent_id, {_SQLITE_DAY}, "
    f"new.id & ~{BLOCK - 1}, new.id | {BLOCK - 1}) ON CONFLICT(agent_id, day) DO UPDATE SET "
    f"first_id = min(first_id, excluded.first_id), last_id = max(last_id, excluded.last_id);"
)
_SQLITE_COVERED = (f"NOT EXISTS (SELECT 1 FROM {TABLE} WHERE agent_id = new.agent_id AND day = {_SQLITE_DAY} "
                   f"AND first_id <= new.id AND last_id >= new.id)")
SQLITE_TRIGGERS = {
    f"{TABLE}_ai": (f"CREATE TRIGGER {TABLE}_ai AFTER INSERT ON messages "
                    f"WHEN {_SQLITE_COVERED} BEGIN {_SQLITE_NOTE} END"),
    f"{TABLE}_au": (f"CREATE TRIGGER {TABLE}_au AFTER UPDATE OF agent_id, created_at ON messages "
                    f"WHEN {_SQLITE_COVERED} BEGIN {_SQLITE_NOTE} END"),
}

POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {TABLE}_note() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    d date := (NEW.created_at AT TIME ZONE 'UTC')::date;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {TABLE} WHERE agent_id = NEW.agent_id AND day = d
                   AND first_id <= NEW.id AND last_id >= NEW.id) THEN
        INSERT INTO {TABLE}(agent_id, day, first_id, last_id)
        VALUES (NEW.agent_id, d, NEW.id & ~{BLOCK - 1}::bigint, NEW.id | {BLOCK - 1}::bigint)
        ON CONFLICT (agent_id, day) DO UPDATE SET first_id = least({TABLE}.first_id, excluded.first_id),
                                                  last_id = greatest({TABLE}.last_id, excluded.last_id);
    END IF;
    RETURN NULL;
END $$"""
POSTGRES_TRIGGER = (f"CREATE TRIGGER {TABLE}_note AFTER INSERT OR UPDATE OF agent_id, created_at ON messages "
                    f"FOR EACH ROW EXECUTE FUNCTION {TABLE}_note()")


def _fill_sql(vendor: str) -> str:
    day = "substr(created_at, 1, 10)" if vendor == "sqlite" else "(created_at AT TIME ZONE 'UTC')::date"
    return (f"INSERT INTO {TABLE}(agent_id, day, first_id, last_id) SELECT agent_id, {day}, "
            f"min(id) & ~{BLOCK - 1}, max(id) | {BLOCK - 1} FROM messages GROUP BY agent_id, {day}")


def install(cursor, vendor: str) -> None:
    """Create the triggers and fill the table from `messages` (migration 0015, and the SQLite repair)."""
    if vendor == "sqlite":
        for name, sql in SQLITE_TRIGGERS.items():
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
            cursor.execute(sql)
    else:
        cursor.execute(POSTGRES_FUNCTION)
        cursor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_note ON messages")
        cursor.execute(POSTGRES_TRIGGER)
    refill(cursor, vendor)


def refill(cursor, vendor: str) -> None:
    cursor.execute(f"DELETE FROM {TABLE}")
    cursor.execute(_fill_sql(vendor))


def uninstall(cursor, vendor: str) -> None:
    if vendor == "sqlite":
        for name in SQLITE_TRIGGERS:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
    else:
        cursor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_note ON messages")
        cursor.execute(f"DROP FUNCTION IF EXISTS {TABLE}_note()")


def _utc_day(when: datetime) -> str:
    return (when.astimezone(UTC) if when.tzinfo else when).date().isoformat()


def id_range(cursor, agent_id: str, start: datetime | None, end: datetime | None) -> tuple[int, int]:
    """The ids between which every message of `agent_id` with start ≤ created_at < end lies, as (lowest,
    highest); (1, 0) when no message of the agent falls on those days."""
    clauses, params = ["agent_id = %s"], [agent_id]
    if start is not None:
        clauses.append("day >= %s")
        params.append(_utc_day(start))
    if end is not None:
        clauses.append("day <= %s")
        params.append(_utc_day(end - timedelta(microseconds=1)))
    cursor.execute(f"SELECT min(first_id), max(last_id) FROM {TABLE} WHERE {' AND '.join(clauses)}", params)
    low, high = cursor.fetchone()
    return (1, 0) if low is None else (int(low), int(high))


def span_ids(cursor, table: str, filters: dict) -> tuple[int, int] | None:
    """The ids of `id_range` for a search of `table` with `filters`, when they bound messages' time for
    one agent; None when they do not."""
    start, end = filters.get("created_at__gte"), filters.get("created_at__lt")
    agent_id = filters.get("agent_id")
    if table != "messages" or (start is None and end is None) or not isinstance(agent_id, str):
        return None
    return id_range(cursor, agent_id, start, end)
