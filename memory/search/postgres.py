"""PostgreSQL: generated `tsvector` columns with GIN indexes, ranked with `ts_rank_cd`, `ts_headline` snippets.

`messages.search_vector` and `memories.search_vector` are GENERATED ALWAYS … STORED (migration 0004),
so the database keeps them current on every write. A search runs the same bounded passes as on SQLite
(`memory.search.plan`), each an index query `search_vector @@ tsquery … ORDER BY id DESC LIMIT n`, and
ranks the candidates in one statement:

    relevance = Σ_t w_t · idf(t) · [vector @@ t] + Σ_phrases idf · [vector @@ phrase]
    score     = relevance · (1 + ts_rank_cd(vector, any term, 1|32)) · recency

The idf-weighted coverage is what a question needs (ts_rank_cd alone knows no corpus statistics and
would rank a message repeating "start" above the one naming "pottery"); ts_rank_cd adds density and
length normalisation from PostgreSQL's own ranking. Every word is a bound parameter of
`plainto_tsquery`/`phraseto_tsquery`, so no user text is ever tsquery syntax.
"""

from __future__ import annotations

import re
import time

from django.db import connection
from django.utils import timezone

from memory.search import plan, rank
from memory.search.filters import where_sql
from memory.search.text import Query, stem

CONFIG = "english"
HEADLINE = ('StartSel=«, StopSel=», MaxWords=30, MinWords=12, ShortWord=2, MaxFragments=2, '
            'FragmentDelimiter=" … "')
EXHAUSTIVE_LIMIT = 500
GIN_ROW_COST = 6
COUNT_PROBE = 200


def _tsquery(item: tuple[str, ...]) -> tuple[str, list]:
    return f"phraseto_tsquery('{CONFIG}', %s)", [" ".join(item)]


def _all(items) -> tuple[str, list]:
    sql, params = [], []
    for item in items:
        s, p = _tsquery(item)
        sql.append(s)
        params += p
    return "(" + " && ".join(sql) + ")", params


def _any(query: Query) -> tuple[str, list]:
    items = [(t.word,) for t in query.terms] + list(query.phrases)
    sql = " || ".join(_tsquery(i)[0] for i in items)
    return f"({sql})", [" ".join(i) for i in items]


def _ids(cursor, corpus, tsquery: str, params: list, filters: dict, limit: int, after_id: int = 0, *,
         by_index: bool = False) -> list[int]:
    """The newest `limit` ids matching `tsquery`. `by_index`: the matches are sparse, so they are taken
    from the GIN index and sorted (`id + 0` is no index order the planner could walk instead)."""
    where, where_params = where_sql("t", filters)
    order = "t.id + 0" if by_index else "t.id"
    cursor.execute(f"SELECT t.id FROM {corpus.table} t WHERE t.search_vector @@ {tsquery} AND {where} "
                   f"AND t.id > %s ORDER BY {order} DESC LIMIT %s", [*params, *where_params, after_id, limit])
    return [row[0] for row in cursor.fetchall()]


def _by_index(step: plan.Pass, df: dict[str, float], max_id: int, filters: dict) -> bool:
    """Whether the pass's matches should come from the GIN index (then sorted) rather than from walking
    the table newest first and testing each row's vector, which the planner prefers for any LIMIT.

    In one conversation always: `messages_chat_search_idx` holds exactly its matches. Elsewhere when
    the walk costs more: it reads about limit × rows / df rows to find `limit` matches (for a word in
    1 row of 1,000, 80,000 rows and 25 ms for 80 matches), the index hands over df rows, each fetched
    from the heap at about GIN_ROW_COST times the cost of a row walked past.
    """
    if isinstance(filters.get("chat_id"), str):
        return True
    known = [df[s] for item in step.words for w in item if (s := stem(w)) in df]
    if not known:
        return False
    rarest = max(min(known), 1.0)
    return GIN_ROW_COST * rarest < step.limit * max_id / rarest


class _CommonLexemes:
    """The planner's statistics of a vector column (`pg_stats.most_common_elems`, kept by ANALYZE):
    the share of rows holding each of its ~1,000 most common lexemes, and the smallest such share."""

    def __init__(self):
        self._entries: dict[tuple[str, str], tuple[float, dict[str, float], float]] = {}

    def get(self, cursor, table: str) -> tuple[dict[str, float], float]:
        key = (connection.alias, table)
        entry = self._entries.get(key)
        if entry is None or time.monotonic() > entry[0]:
            cursor.execute("SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats "
                           "WHERE schemaname = current_schema() AND tablename = %s AND attname = 'search_vector'",
                           [table])
            row = cursor.fetchone()
            elems, freqs = (row[0] or [], row[1] or []) if row else ([], [])
            shares = dict(zip(elems, freqs, strict=False))
            least = freqs[len(elems)] if len(freqs) > len(elems) else 0.0
            entry = self._entries[key] = (time.monotonic() + plan.CACHE_SECONDS, shares, least)
        return entry[1], entry[2]


common_lexemes = _CommonLexemes()


def _document_frequencies(cursor, corpus, query: Query, max_id: int) -> dict[str, float]:
    """How many rows hold each term: from the planner's statistics for a common lexeme, else counted
    through the GIN index up to COUNT_PROBE rows (each a heap block to visit; a word outside the
    statistics is rarer than every word in them, and one with more matches than the probe is placed
    between the two). Never `ORDER BY id … LIMIT`: for a rare word the planner may walk the whole
    table backwards looking for it."""
    out, missing = {}, []
    for term in query.terms:
        df = plan.document_frequencies.get((connection.alias, corpus.table, term.stem), max_id)
        if df is None:
            missing.append(term)
        else:
            out[term.stem] = df
    if not missing:
        return out
    shares, least = common_lexemes.get(cursor, corpus.table)
    cursor.execute(f"SELECT w, tsvector_to_array(to_tsvector('{CONFIG}', w)) FROM unnest(%s::text[]) AS w",
                   [[t.word for t in missing]])
    lexemes = dict(cursor.fetchall())
    for term in missing:
        found = lexemes.get(term.word) or []
        if found and all(lexeme in shares for lexeme in found):
            df = min(shares[lexeme] for lexeme in found) * max_id
        else:
            sql, params = _tsquery((term.word,))
            cursor.execute(f"SELECT count(*) FROM (SELECT 1 FROM {corpus.table} t WHERE t.search_vector @@ {sql} "
                           f"LIMIT %s) AS hits", [*params, COUNT_PROBE])
            count = cursor.fetchone()[0]
            # Beyond the probe, somewhere below the least common word of the statistics: in between.
            df = float(count) if count < COUNT_PROBE else max(float(COUNT_PROBE),
                                                              (COUNT_PROBE * least * max_id) ** 0.5)
        plan.document_frequencies.put((connection.alias, corpus.table, term.stem), max_id, df)
        out[term.stem] = df
    return out


def _ranked(cursor, corpus, query: Query, ids: list[int], filters: dict, idfs: dict, limit: int):
    parts, params = [], []
    for term in query.terms:
        sql, p = _tsquery((term.word,))
        parts.append(f"%s * (t.search_vector @@ {sql})::int")
        params += [term.weight * idfs.get(term.stem, 1.0), *p]
    for phrase in query.phrases:
        sql, p = _tsquery(phrase)
        parts.append(f"%s * (t.search_vector @@ {sql})::int")
        params += [sum(idfs.get(s, 1.0) for s in phrase), *p]
    any_sql, any_params = _any(query)
    where, where_params = where_sql("t", filters)
    text = " || ': ' || ".join(f"t.{c}" for c in corpus.text_columns)
    age_days = f"extract(epoch from (%s - t.{corpus.time_column})) / 86400.0"
    cursor.execute(
        f"WITH ranked AS (SELECT t.id, {text} AS body, "
        f"greatest({' + '.join(parts) or '0'}, {rank.FLOOR}) "
        f"* (1 + ts_rank_cd(t.search_vector, {any_sql}, 1|32)) "
        f"* (1 + {rank.RECENCY_WEIGHT} * power(0.5, greatest({age_days}, 0) / {rank.RECENCY_HALF_LIFE_DAYS})) "
        f"AS score FROM {corpus.table} t WHERE t.id = ANY(%s) AND {where} ORDER BY score DESC, t.id DESC LIMIT %s) "
        f"SELECT id, score, ts_headline('{CONFIG}', body, {any_sql}, %s) FROM ranked ORDER BY score DESC, id DESC",
        [*params, *any_params, timezone.now(), ids, *where_params, limit, *any_params, HEADLINE],
    )
    return [rank.Scored(i, float(score), snippet) for i, score, snippet in cursor.fetchall()]


def _every_word(cursor, corpus, query: Query, filters: dict, limit: int) -> list[rank.Scored]:
    """Stop words only: the `english` vectors do not hold them, so match words in the text, newest first:
    the rows with all of them, else (when no row has all) those with any, if each word is in one."""
    rows = _word_rows(cursor, corpus, query, filters, every=True)
    if not rows:
        rows = _word_rows(cursor, corpus, query, filters, every=False)
        patterns = [re.compile(rf"\b{re.escape(t.word)}\b", re.IGNORECASE) for t in query.terms]
        if not all(any(p.search(text or "") for _, text, _ in rows) for p in patterns):
            rows = []
    return rank.rank(query, rows, idfs={}, now=timezone.now(), limit=limit)


def _word_rows(cursor, corpus, query: Query, filters: dict, every: bool) -> list[tuple]:
    where, params = where_sql("t", filters)
    text = " || ': ' || ".join(f"t.{c}" for c in corpus.text_columns)
    words = (" AND " if every else " OR ").join(f"{text} ~* %s" for _ in query.terms)
    cursor.execute(f"SELECT t.id, {text}, t.{corpus.time_column} FROM {corpus.table} t WHERE ({words}) AND {where} "
                   f"ORDER BY t.id DESC LIMIT %s", [*(rf"\m{t.word}\M" for t in query.terms), *params, plan.TERM_LIMIT])
    return cursor.fetchall()


def search(corpus, query: Query, filters: dict, limit: int) -> list[rank.Scored]:
    with connection.cursor() as cursor:
        if query.require_all:
            return _every_word(cursor, corpus, query, filters, limit)
        cursor.execute(f"SELECT max(id) FROM {corpus.table}")
        max_id = cursor.fetchone()[0] or 0
        if not max_id:
            return []
        df = _document_frequencies(cursor, corpus, query, max_id)

        def run(step: plan.Pass) -> list[int]:
            sql, params = _all(step.words)
            return _ids(cursor, corpus, sql, params, filters, step.limit, step.after_id,
                        by_index=_by_index(step, df, max_id, filters))

        ids, cut = plan.collect(plan.passes(query, df, max_id), run)
        if not ids and (fallback := plan.fallback(query, df)):  # the passes apply the filters
            ids, _ = plan.collect(fallback, run)
            cut = True  # still nothing: the exhaustive pass
        if cut and len(ids) < limit:
            sql, params = _any(query)
            ids += [i for i in _ids(cursor, corpus, sql, params, filters, EXHAUSTIVE_LIMIT) if i not in set(ids)]
        if not ids:
            return []
        idfs = {stem: rank.idf(value, max_id) for stem, value in df.items()}
        return _ranked(cursor, corpus, query, ids, filters, idfs, limit)
