"""SQLite FTS5 mirrors of `messages` and `memories`, and the guard that keeps their triggers alive.

The mirrors are external-content tables: they index the base table's rows by rowid and hold no copy
of the text. Besides the text they index the scope columns (agent, owner, conversation), so a search
scoped to one conversation is an intersection inside the index (see `memory.search.sqlite`). Three
triggers per table keep them exact. The delete and update triggers must hand FTS5 the OLD column
values, or the index keeps tokens of text that no longer exists.

Django rebuilds a SQLite table (create new, copy, drop old, rename) on many schema changes, and the
drop takes the triggers with it. `missing_triggers` feeds system check memory.E001; `repair`
re-creates what is missing and rebuilds the index from the base table (the `rebuild_search_index`
command, and a post_migrate hook so a future migration heals itself). The guard covers the triggers of
`message_days` on `messages` too (`memory.days`), and refills that table when they were gone.

Each committed write adds a small segment to an FTS5 index, and FTS5 merges them level by level, so
a large index is spread over a dozen or more segments and every lookup of a common word seeks in each
of them. `optimize` merges them into one in short steps (the daily schedule
`fermix-search-index-optimize` and `rebuild_search_index --optimize`); recall at a million messages
is measured on an index kept that way (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction

from memory import days

TOKENIZER = "porter unicode61 remove_diacritics 2"


@dataclass(frozen=True)
class Mirror:
    """An FTS5 table over `table`: its text columns, then the scope columns it also indexes.

    The scope columns (agent, owner, conversation) are indexed as tokens so a search can restrict
    itself to one conversation or owner inside the index (`chat_id : "123" AND content : "word"`),
    where FTS5 intersects posting lists, instead of joining every match of a common word to the
    base table. They are real columns of the base table, so `rebuild` and the integrity check
    still read everything from it.
    """

    name: str
    table: str
    text_columns: tuple[str, ...]
    scope_columns: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return self.text_columns + self.scope_columns

    def _values(self, prefix: str) -> str:
        return ", ".join(f"{prefix}.{c}" for c in self.columns)

    @property
    def triggers(self) -> dict[str, str]:
        cols = ", ".join(self.columns)
        changed = " OR ".join(f"old.{c} IS NOT new.{c}" for c in self.columns)
        insert = f"INSERT INTO {self.name}(rowid, {cols}) VALUES (new.id, {self._values('new')});"
        delete = (
            f"INSERT INTO {self.name}({self.name}, rowid, {cols}) "
            f"VALUES ('delete', old.id, {self._values('old')});"
        )
        return {
            f"{self.name}_ai": f"CREATE TRIGGER {self.name}_ai AFTER INSERT ON {self.table} BEGIN {insert} END",
            f"{self.name}_ad": f"CREATE TRIGGER {self.name}_ad AFTER DELETE ON {self.table} BEGIN {delete} END",
            f"{self.name}_au": (
                f"CREATE TRIGGER {self.name}_au AFTER UPDATE ON {self.table} WHEN {changed} "
                f"BEGIN {delete} {insert} END"
            ),
        }

    @property
    def create_table(self) -> str:
        return (
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.name} USING fts5("
            f"{', '.join(self.columns)}, content='{self.table}', content_rowid='id', tokenize='{TOKENIZER}')"
        )


MIRRORS = (
    Mirror("messages_fts", "messages", ("content",), ("agent_id", "owner_id", "channel", "chat_id", "thread_scope")),
    Mirror("memories_fts", "memories", ("key", "value"), ("agent_id", "owner_id")),
)
MIRROR = {m.table: m for m in MIRRORS}


def create_all(cursor) -> None:
    for mirror in MIRRORS:
        cursor.execute(mirror.create_table)
        for name, sql in mirror.triggers.items():
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
            cursor.execute(sql)
        cursor.execute(f"INSERT INTO {mirror.name}({mirror.name}) VALUES ('rebuild')")


def drop_all(cursor) -> None:
    for mirror in MIRRORS:
        for name in mirror.triggers:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
        cursor.execute(f"DROP TABLE IF EXISTS {mirror.name}")


def _existing(cursor, kind: str) -> set[str]:
    cursor.execute("SELECT name FROM sqlite_master WHERE type = %s", [kind])
    return {row[0] for row in cursor.fetchall()}


def missing_triggers(connection) -> list[str]:
    """Names of mirror tables or triggers that should exist and do not (SQLite only)."""
    if connection.vendor != "sqlite":
        return []
    with connection.cursor() as cursor:
        tables, triggers = _existing(cursor, "table"), _existing(cursor, "trigger")
    missing = []
    for mirror in MIRRORS:
        if mirror.table not in tables:
            continue  # not migrated yet: nothing to guard
        if mirror.name not in tables:
            missing.append(mirror.name)
        missing.extend(name for name in mirror.triggers if name not in triggers)
    if {"messages", days.TABLE} <= tables:
        missing.extend(name for name in days.SQLITE_TRIGGERS if name not in triggers)
    return missing


def repair(connection) -> list[str]:
    """Re-create missing mirrors and triggers; rebuild each repaired index. Returns what was repaired."""
    missing = missing_triggers(connection)
    if not missing:
        return []
    with connection.cursor() as cursor:
        for mirror in MIRRORS:
            if not any(m == mirror.name or m.startswith(mirror.name + "_") for m in missing):
                continue
            cursor.execute(mirror.create_table)
            for name, sql in mirror.triggers.items():
                if name in missing:
                    cursor.execute(sql)
            # Rows written while a trigger was gone are not in the index: rebuild from the base table.
            cursor.execute(f"INSERT INTO {mirror.name}({mirror.name}) VALUES ('rebuild')")
        if any(name in days.SQLITE_TRIGGERS for name in missing):
            days.install(cursor, "sqlite")  # and rows written meanwhile are not in `message_days`: refilled
    return missing


def rebuild(connection, progress: Callable[[int], None] | None = None) -> list[str]:
    """Rebuild every mirror from its base table (after repair). Returns the mirrors rebuilt.

    FTS5 rebuilds a mirror in one statement, so `progress` hears the mirrors done, one at a time."""
    if connection.vendor != "sqlite":
        return []
    repair(connection)
    with connection.cursor() as cursor:
        for done, mirror in enumerate(MIRRORS, start=1):
            cursor.execute(f"INSERT INTO {mirror.name}({mirror.name}) VALUES ('rebuild')")
            if progress:
                progress(done)
        days.refill(cursor, "sqlite")
    return [m.name for m in MIRRORS]


def integrity_check(connection) -> list[str]:
    """Mirrors whose index disagrees with their base table (FTS5 'integrity-check' with rank 1)."""
    if connection.vendor != "sqlite":
        return []
    bad = []
    with connection.cursor() as cursor:
        for mirror in MIRRORS:
            try:
                cursor.execute(f"INSERT INTO {mirror.name}({mirror.name}, rank) VALUES ('integrity-check', 1)")
            except Exception:  # noqa: BLE001 - sqlite reports corruption as a generic DatabaseError
                bad.append(mirror.name)
    return bad


MERGE_PAGES = 100  # pages one merge step writes: 10-60 ms, the longest a writer waits for it
OPTIMIZE_ABOVE_SEGMENTS = 4


def segments(connection, mirror: Mirror) -> int:
    """How many segments the mirror's index is spread over."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(DISTINCT segid) FROM {mirror.name}_idx")
        return cursor.fetchone()[0]


def optimize(connection, *, above: int = 0, steps: int = 1_000_000) -> dict[str, int]:
    """Merge each mirror spread over more than `above` segments into one, at most `steps` steps each.

    The same as FTS5's 'optimize', but in steps of MERGE_PAGES pages ('merge' with a negative
    argument), each its own short write transaction, so writers wait for one step at most instead
    of for the whole index being rewritten. Returns the segment count of each mirror afterwards.
    """
    if connection.vendor != "sqlite":
        return {}

    after = {}
    for mirror in MIRRORS:
        if segments(connection, mirror) > above:
            for _ in range(steps):
                with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                    before = connection.connection.total_changes
                    cursor.execute(f"INSERT INTO {mirror.name}({mirror.name}, rank) VALUES ('merge', %s)",
                                   [-MERGE_PAGES])
                    if connection.connection.total_changes - before < 2:  # FTS5: no work was left
                        break
        after[mirror.name] = segments(connection, mirror)
    return after


def quote_query(text: str) -> str:
    """Turn any user text into a safe FTS5 query: each token quoted, joined by OR.

    FTS5 treats `AND`, `OR`, `NOT`, `NEAR`, `(`, `"`, `*`, `:` and `^` as syntax; quoting every token
    (with embedded quotes doubled) makes each one a plain string, so `C++`, `node.js` or a lone `(`
    never raise. Returns "" when the text has nothing searchable.
    """
    # A NUL would end the FTS5 string literal early ("unterminated string"): it is never text to search.
    tokens = [t for t in text.replace("\x00", " ").split() if any(ch.isalnum() for ch in t)]
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in tokens)
