"""SQLite: bounded FTS5 passes over the mirrors, then BM25-style ranking of the candidates in Python.

FTS5's own `bm25()` is not used on the hot path: it counts every match of every phrase to compute its
statistics, which for a common word is most of the table. The mirrors also index the scope columns,
so `chat_id : "42" AND content : "pottery"` is answered by intersecting posting lists (FTS5 seeks
through the longer list) instead of joining each match to `messages`; the exact filters are applied
afterwards in SQL, on the candidates only.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import DatabaseError, connection
from django.utils import timezone

from memory import days, fts
from memory.search import plan, rank
from memory.search.filters import where_sql
from memory.search.text import Query, fts_string, stem, words

EXHAUSTIVE_LIMIT = 500


def _max_id(cursor, table: str) -> int:
    cursor.execute(f"SELECT max(id) FROM {table}")
    return cursor.fetchone()[0] or 0


def _colset(columns) -> str:
    return "{" + " ".join(columns) + "}"


def _scope(cursor, mirror: fts.Mirror, filters: dict, max_id: int) -> tuple[list[str], float | None]:
    """A column filter for the most selective scope column the mirror indexes, if it narrows enough.

    Only one, and only a selective one: a conjunction with a token most rows carry (the only agent's
    id, the thread `root`) reads that token's whole posting list and costs more than it saves. SQL
    applies every filter exactly afterwards, so this only has to be a superset. How far back a token's
    newest rows reach says how common it is, except after a burst of one scope's rows (a conversation
    backfilled, a busy hour of one chat): its newest thousand then all lie at the top of the table, and a
    conversation of 4 % of a million messages looked like two thirds of them, so its queries walked the
    whole index (40 ms where 10 had done). Where that estimate says not selective, the token's rows are
    counted, up to the threshold.
    """
    best = None
    for column in mirror.scope_columns:
        value = filters.get(column)
        if isinstance(value, list | tuple) and len(value) == 1:
            value = value[0]
        if value is None or isinstance(value, list | tuple | set):
            continue
        tokens = words(str(value))
        if not tokens:
            continue
        expression = f"{column} : {fts_string(tokens)}"
        df = _frequency(cursor, mirror, ("scope", column, str(value)), expression, max_id,
                        count_above=plan.SELECTIVE_SCOPE * max_id)
        if df <= plan.SELECTIVE_SCOPE * max_id and (best is None or df < best[0]):
            best = (df, expression)
    return ([best[1]], best[0]) if best else ([], None)


def _frequency(cursor, mirror: fts.Mirror, key: tuple, expression: str, max_id: int,
               count_above: float | None = None) -> float:
    """The rows matching `expression`, estimated from its newest matches (`plan.estimate_df`); where the
    estimate is above `count_above`, counted instead, up to just past it."""
    cache_key = (connection.alias, mirror.name, *key)
    df = plan.document_frequencies.get(cache_key, max_id)
    if df is None:
        newest = _ids(cursor, mirror, expression, plan.DF_PROBE)
        df = plan.estimate_df(newest, plan.DF_PROBE, max_id)
        if count_above is not None and df > count_above and len(newest) == plan.DF_PROBE:
            cursor.execute(f"SELECT count(*) FROM (SELECT rowid FROM {mirror.name} WHERE {mirror.name} MATCH %s "
                           "LIMIT %s)", [expression, int(count_above) + 1])
            df = float(cursor.fetchone()[0])
        plan.document_frequencies.put(cache_key, max_id, df)
    return df


def _ids(cursor, mirror: fts.Mirror, match: str, limit: int, after_id: int = 0,
         before_id: int | None = None) -> list[int]:
    before, params = ("", []) if before_id is None else ("AND rowid < %s ", [before_id])
    try:
        cursor.execute(f"SELECT rowid FROM {mirror.name} WHERE {mirror.name} MATCH %s AND rowid > %s "
                       f"{before}ORDER BY rowid DESC LIMIT %s", [match, after_id, *params, limit])
    except DatabaseError:  # a token FTS5 still refuses: that pass finds nothing, the others still run
        return []
    return [row[0] for row in cursor.fetchall()]


def _frequencies(cursor, mirror, words_by_stem: dict[str, str], max_id: int) -> dict[str, float]:
    text = _colset(mirror.text_columns)
    return {s: _frequency(cursor, mirror, ("term", s), f"{text} : {fts_string(word)}", max_id)
            for s, word in words_by_stem.items()}


def _when(value) -> datetime | None:
    if value is None:
        return None
    try:
        when = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)  # stored as naive UTC


def _rows(cursor, corpus, ids: list[int], filters: dict) -> list[tuple[int, str, datetime | None]]:
    if not ids:
        return []
    where, params = where_sql("t", filters, by_key=True)
    text = " || ': ' || ".join(f"t.{c}" for c in corpus.text_columns)
    cursor.execute(f"SELECT t.id, substr({text}, 1, {rank.READ_CHARS}), t.{corpus.time_column} "
                   f"FROM {corpus.table} t WHERE t.id IN ({', '.join(['%s'] * len(ids))}) AND {where}", [*ids, *params])
    return [(i, content or "", _when(when)) for i, content, when in cursor.fetchall()]


def _exhaustive(cursor, corpus, mirror, query: Query, filters: dict, scope: list[str],
                span: tuple[int, int] | None) -> list[int]:
    """Newest matches of any word that pass the filters: for filters the index cannot apply itself (the
    scope's token, when it is selective, inside the match: the walk then covers the scope's matches only;
    a time span's ids, `span`, bound the walk)."""
    items = [fts_string(t.word) for t in query.terms] + [fts_string(p) for p in query.phrases]
    match = " AND ".join(scope + [f"{_colset(mirror.text_columns)} : ({' OR '.join(items)})"])
    where, params = where_sql("t", filters, by_key=True)
    low, high = span or (0, None)
    before = "" if high is None else f"AND {mirror.name}.rowid <= %s "
    try:
        cursor.execute(f"SELECT t.id FROM {mirror.name} JOIN {corpus.table} t ON t.id = {mirror.name}.rowid "
                       f"WHERE {mirror.name} MATCH %s AND {mirror.name}.rowid >= %s {before}AND {where} "
                       f"ORDER BY {mirror.name}.rowid DESC LIMIT %s",
                       [match, low, *([] if high is None else [high]), *params, EXHAUSTIVE_LIMIT])
    except DatabaseError:
        return []
    return [row[0] for row in cursor.fetchall()]


def search(corpus, query: Query, filters: dict, limit: int) -> list[rank.Scored]:
    mirror = fts.MIRROR[corpus.table]
    text = _colset(mirror.text_columns)
    with connection.cursor() as cursor:
        max_id = _max_id(cursor, corpus.table)
        span = days.span_ids(cursor, corpus.table, filters)
        if not max_id or (span and span[0] > span[1]):
            return []
        df = _frequencies(cursor, mirror, {t.stem: t.word for t in query.terms}, max_id)
        scope, scope_df = _scope(cursor, mirror, filters, max_id)

        def run(step: plan.Pass) -> list[int]:
            match = " AND ".join(scope + [f"{text} : {fts_string(item)}" for item in step.words])
            step = plan.within(step, max_id, span)
            return _ids(cursor, mirror, match, step.limit, step.after_id, step.before_id)

        # Phrase words that are not terms (stop words) size the phrase passes only, not the ranking.
        phrase_words = {stem(w): w for phrase in query.phrases for w in phrase if stem(w) not in df}
        sizes = {**df, **_frequencies(cursor, mirror, phrase_words, max_id)}
        ids, cut = plan.collect(plan.passes(query, sizes, max_id, scope_df), run)
        docs = _rows(cursor, corpus, ids, filters)
        if not docs and (fallback := plan.fallback(query, sizes)):
            ids, _ = plan.collect(fallback, run)
            docs, cut = _rows(cursor, corpus, ids, filters), True  # still nothing: the exhaustive pass
        if cut and len(docs) < limit:
            seen = {d[0] for d in docs}
            extra = [i for i in _exhaustive(cursor, corpus, mirror, query, filters, scope, span) if i not in seen]
            docs += _rows(cursor, corpus, extra, filters)
    idfs = {stem: rank.idf(value, max_id) for stem, value in df.items()}
    return rank.rank(query, docs, idfs=idfs, now=timezone.now(), limit=limit)
