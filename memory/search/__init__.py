"""Full-text search over messages and memories: one interface, the database's own index underneath.

`search_messages` and `search_memories` take any user text (a question, keywords, a quoted phrase),
`filters` (column → value, or a list of values, or `<column>__isnull` → bool) and a limit, and return
model rows best first, each with `search_score` and a `snippet` (the best window of the text, matched
words in «…»). Any text is a valid query; text without words returns nothing.

SQLite answers from the FTS5 mirrors (`memory.search.sqlite`), PostgreSQL from generated `tsvector`
columns with GIN indexes (`memory.search.postgres`); both collect a bounded candidate set with the same
plan (`memory.search.plan`) so recall stays fast on large tables, then rank it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import Model, Q

from memory.models import Memory, Message
from memory.search import postgres, rank, sqlite
from memory.search.filters import column_of, where_sql
from memory.search.rank import Scored
from memory.search.text import Query, analyse

MAX_LIMIT = 100
# A reply often answers without repeating the words of what it answers ("How old is Biscuit?" —
# "He's a two year old beagle"), so the next messages after each of the best FOLLOWED hits in its
# conversation join the results at a share of that hit's score (FOLLOW_SHARES: the next, the one after).
FOLLOWED, FOLLOW_SHARES = 5, (0.7, 0.5)


@dataclass(frozen=True)
class Corpus:
    """A searchable table: its text columns (scored and shown joined by ': ') and its time column."""

    model: type[Model]
    table: str
    text_columns: tuple[str, ...]
    time_column: str


MESSAGES = Corpus(Message, "messages", ("content",), "created_at")
MEMORIES = Corpus(Memory, "memories", ("key", "value"), "updated_at")
BACKENDS = {"sqlite": sqlite, "postgresql": postgres}


def orm_filters(filters: dict) -> dict:
    """Search `filters` as ORM lookups (a list of values is `__in`; bounds and `__isnull` are lookups already)."""
    return {(f"{k}__in" if isinstance(v, list | tuple | set) else k): v for k, v in filters.items() if v is not None}


def _check_filters(corpus: Corpus, filters: dict) -> None:
    names = {f.column for f in corpus.model._meta.concrete_fields}
    for column in filters:
        if column_of(column) not in names:
            raise ValueError(f"cannot filter {corpus.table} on {column!r}")


def _fallback(corpus: Corpus, query: Query, filters: dict, limit: int) -> list[Scored]:
    """Any other database: substring match of the content words, newest first."""
    q = Q()
    for term in query.terms:
        for name in corpus.text_columns:
            q |= Q(**{f"{name}__icontains": term.word})
    rows = corpus.model.objects.filter(**orm_filters(filters)).filter(q).order_by("-pk")[:limit]
    return [Scored(row.pk, 0.0, "") for row in rows]


def lexical_hits(corpus: Corpus, query, filters: dict, limit: int, *, cut: list[Scored] | None = None) -> list[Scored]:
    """The lexical ranking of `query` (with the replies after the best message hits), best first; `cut` as
    in `with_replies`."""
    limit = max(1, min(int(limit), MAX_LIMIT))
    _check_filters(corpus, filters)
    parsed = analyse(query if isinstance(query, str) else str(query or ""))
    if not parsed:
        return []
    backend = BACKENDS.get(connection.vendor)
    hits = backend.search(corpus, parsed, filters, limit) if backend else _fallback(corpus, parsed, filters, limit)
    if corpus is MESSAGES:
        hits = with_replies(hits, filters, limit, cut=cut)
    return hits


def rows_of(corpus: Corpus, hits: list[Scored]) -> list:
    """The model rows of `hits`, in their order, each with `search_score`, `snippet` and the hit itself."""
    rows = corpus.model.objects.in_bulk([h.id for h in hits])
    found = []
    for hit in hits:
        row = rows.get(hit.id)
        if row is not None:
            row.search_score, row.snippet, row.hit = hit.score, hit.snippet, hit
            found.append(row)
    return found


def _search(corpus: Corpus, query, filters: dict, limit: int) -> list:
    return rows_of(corpus, lexical_hits(corpus, query, filters, limit))


# The next messages of a hit's conversation on SQLite (PostgreSQL: `postgres.following`, one statement).
REPLIES_SQL = (f"SELECT m.id, substr(m.content, 1, {rank.READ_CHARS}), m.created_at FROM messages m "
               "WHERE {conversation} AND m.created_at >= %s "
               "AND {where} ORDER BY m.created_at, m.id LIMIT %s")


def following(ids: list[int], filters: dict, count: int) -> dict[int, list[tuple[int, str]]]:
    """The next `count` messages passing `filters` after each of `ids` in its conversation: id, content."""
    return (postgres.following if connection.vendor == "postgresql" else _following)(ids, filters, count)


def _following(ids: list[int], filters: dict, count: int) -> dict[int, list[tuple[int, str]]]:
    """`following` on SQLite: each hit's conversation index walked from the hit, a statement a hit."""
    where, params = where_sql("m", filters, by_key=True)
    conversation = "m.agent_id = %s AND m.channel = %s AND m.chat_id = %s AND m.thread_scope = %s"
    replies = REPLIES_SQL.format(conversation=conversation, where=where)
    out = {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, agent_id, channel, chat_id, thread_scope, created_at FROM messages "
                       f"WHERE id IN ({', '.join(['%s'] * len(ids))})", ids)
        found = {row[0]: row for row in cursor.fetchall()}
        for hit_id in ids:
            if hit_id not in found:
                continue
            _, *same, created_at = found[hit_id]
            # The conversation index serves `created_at >=` in order; equal times are told apart by id.
            cursor.execute(replies, [*same, created_at, *params, count + 3])
            later = [r for r in cursor.fetchall() if (r[2], r[0]) > (created_at, hit_id)]
            out[hit_id] = [(reply_id, content) for reply_id, content, _ in later[:count]]
    return out


def passing(table: str, ids: list[int], filters: dict) -> set[int]:
    """The ids among `ids` whose rows in `table` pass `filters`, looked up by key (candidates found
    elsewhere, such as the nearest vectors, checked exactly as lexical candidates are)."""
    if not ids:
        return set()
    where, params = where_sql("t", filters, by_key=True)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT t.id FROM {table} t WHERE t.id IN ({', '.join(['%s'] * len(ids))}) AND {where}",
                       [*ids, *params])
        return {row[0] for row in cursor.fetchall()}


# The columns that pin a scope to one conversation or one owner: indexes that end in `id` start with them.
_PINS = {"messages": (("agent_id", "channel", "chat_id", "thread_scope"), ("agent_id", "owner_id"))}


def any_after(table: str, after_id: int, filters: dict) -> bool:
    """True when a row of `table` past `after_id` passes `filters`. A scope pinned to one conversation or
    owner is walked through its index from `after_id` (`messages_window_idx`, `messages_owner_idx`: its own
    newer rows only); any other is walked by key from `after_id`, since an index of the filters' columns
    would walk every row of the scope to find the few newer ones. The other filters are checked on the rows
    walked."""
    pinned: dict = {}
    for columns in _PINS.get(table, ()):
        if all(isinstance(filters.get(c), str) for c in columns):
            pinned = {c: filters[c] for c in columns}
            break
    walked, walked_params = where_sql("t", pinned)
    where, params = where_sql("t", {k: v for k, v in filters.items() if k not in pinned}, by_key=True)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} t WHERE {walked} AND t.id > %s AND {where} LIMIT 1",
                       [*walked_params, after_id, *params])
        return cursor.fetchone() is not None


def with_replies(hits: list[Scored], filters: dict, limit: int, *, cut: list[Scored] | None = None) -> list[Scored]:
    """`hits` with the next messages after the best FOLLOWED of them, best first, the first `limit`. `cut`,
    when given, receives the replies that did not make the first `limit` (each a `Scored` with its hit and
    share), so that a fusion can still place them after their hit (`memory.search.recall.fuse`)."""
    scores = {h.id: h for h in hits}
    top = hits[:FOLLOWED]
    if not top:
        return hits
    replies = following([h.id for h in top], filters, len(FOLLOW_SHARES))
    added = []
    for hit in top:
        for (reply_id, content), share in zip(replies.get(hit.id, []), FOLLOW_SHARES, strict=False):
            reply = Scored(reply_id, hit.score * share, rank.snippet(content, set(), {}), reply_to=hit.id,
                           share=share)
            added.append(reply)
            if reply_id not in scores or scores[reply_id].score < reply.score:
                scores[reply_id] = reply
    ranked = sorted(scores.values(), key=lambda h: (-h.score, -h.id))[:limit]
    if cut is not None:
        kept = {h.id for h in ranked}
        cut.extend(reply for reply in added if reply.id not in kept)
    return ranked


def search_memories(*, query: str, filters: dict, limit: int = 20) -> list[Memory]:
    """Memory rows for `query` (a question or words), best first; `filters` are column = value(s)."""
    return _search(MEMORIES, query, filters, limit)


def search_messages(*, query: str, filters: dict, limit: int = 20) -> list[Message]:
    """Messages for `query` (a question or words), best first; `filters` are column = value(s)."""
    return _search(MESSAGES, query, filters, limit)
