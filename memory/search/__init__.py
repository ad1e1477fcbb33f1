"""Full-text search over messages and memories, one interface for every database.

SQLite uses the FTS5 mirrors (`memory.fts`), ranked by bm25. Any user text is a valid query: it is
reduced to quoted tokens first, so FTS5 syntax characters are plain text.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.db.models import Q

from memory import fts
from memory.models import Memory, Message

MAX_LIMIT = 100


def _tokens(query: str) -> list[str]:
    return [t for t in query.split() if any(ch.isalnum() for ch in t)]


def _where(alias: str, filters: dict) -> tuple[str, list]:
    clauses, params = [], []
    for column, value in filters.items():
        if value is None:
            continue
        if column.endswith("__isnull"):
            clauses.append(f"{alias}.{column[:-8]} IS {'' if value else 'NOT '}NULL")
        elif isinstance(value, list | tuple | set):
            clauses.append(f"{alias}.{column} IN ({', '.join(['%s'] * len(value))})")
            params.extend(value)
        else:
            clauses.append(f"{alias}.{column} = %s")
            params.append(value)
    return " AND ".join(clauses) or "1=1", params


def _sqlite_ids(mirror: str, table: str, query: str, filters: dict, limit: int) -> list[int]:
    match = fts.quote_query(query)
    if not match:
        return []
    where, params = _where("t", filters)
    sql = (f"SELECT t.id FROM {mirror} JOIN {table} t ON t.id = {mirror}.rowid "
           f"WHERE {mirror} MATCH %s AND {where} ORDER BY bm25({mirror}), t.id DESC LIMIT %s")
    with connection.cursor() as cursor:
        cursor.execute(sql, [match, *params, limit])
        return [row[0] for row in cursor.fetchall()]


def _fallback_q(fields: Sequence[str], query: str) -> Q:
    q = Q()
    for token in _tokens(query):
        for name in fields:
            q |= Q(**{f"{name}__icontains": token})
    return q


def _orm(filters: dict) -> dict:
    return {(f"{k}__in" if isinstance(v, list | tuple | set) else k): v for k, v in filters.items() if v is not None}


def _ordered(model, ids: list[int]):
    rows = {row.pk: row for row in model.objects.filter(pk__in=ids)}
    return [rows[i] for i in ids if i in rows]


def search_memories(*, query: str, filters: dict, limit: int = 20) -> list[Memory]:
    """Memory rows matching any content word of `query`, best first; `filters` are column = value."""
    limit = max(1, min(limit, MAX_LIMIT))
    if not _tokens(query):
        return []
    if connection.vendor == "sqlite":
        return _ordered(Memory, _sqlite_ids("memories_fts", "memories", query, filters, limit))
    rows = Memory.objects.filter(**_orm(filters)).filter(_fallback_q(("key", "value"), query))
    return list(rows.order_by("-updated_at", "-id")[:limit])


def search_messages(*, query: str, filters: dict, limit: int = 20) -> list[Message]:
    """Messages matching any content word of `query`, best first; `filters` are column = value."""
    limit = max(1, min(limit, MAX_LIMIT))
    if not _tokens(query):
        return []
    if connection.vendor == "sqlite":
        return _ordered(Message, _sqlite_ids("messages_fts", "messages", query, filters, limit))
    rows = Message.objects.filter(**_orm(filters)).filter(_fallback_q(("content",), query))
    return list(rows.order_by("-id")[:limit])
