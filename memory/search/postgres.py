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

Each pass takes its newest matches the cheapest way its word's frequency allows, since a pass's cost is
the heap rows it visits (the planner, left alone, walks for any LIMIT or sorts every match):

- a frequent word is walked newest first, the table's rows or one conversation's (`_walk_rows`:
  about limit × rows / df rows; in a conversation at most WALK_BOUND times that, then the index);
- a sparse one comes from the GIN index; over an agent's rows newest ids first (`_from_index`): sorting
  by id needs each match's row, so the ids where about INDEX_WINDOW × limit matches are go first;
- in one conversation from `messages_chat_search_idx` alone, the other filters applied outside a
  fenced subquery (`_in_conversation`);
- a quoted phrase's stop words size its pass (`english` keeps "weren", in 45 % of rows).

The replies after the best hits are one statement (`following`). Measured in docs/performance.md.
"""

from __future__ import annotations

import re
import time

from django.db import connection
from django.utils import timezone

from memory.search import plan, rank
from memory.search.filters import column_of, where_sql
from memory.search.text import Query, Term, stem

CONFIG = "english"
HEADLINE = ('StartSel=«, StopSel=», MaxWords=30, MinWords=12, ShortWord=2, MaxFragments=2, '
            'FragmentDelimiter=" … "')
EXHAUSTIVE_LIMIT = 500
GIN_ROW_COST = 6
WINDOWED_ROW_COST = 0.4
NARROWING = ("owner_id", "scope_id", "created_at", "updated_at")  # filters that leave few of an agent's rows
COUNT_PROBE = 200
WALK_ROWS = 1_000  # in one conversation a pass walks its newest rows when it expects its matches within these
WALK_BOUND = 4  # ...and reads at most this many times the rows expected before asking the index
INDEX_WINDOW = 2  # an index pass first reads the ids where about twice its limit of matches are
WINDOW_GROWTH = 4  # ...then four times as many older ids while matches are missing


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
         by_index: bool = False, before_id: int | None = None) -> list[int]:
    """The newest `limit` ids matching `tsquery` in (after_id, before_id). `by_index`: the matches are sparse,
    so they are taken from the GIN index and sorted (`id + 0` is no index order the planner could walk)."""
    where, where_params = where_sql("t", filters)
    order = "t.id + 0" if by_index else "t.id"
    before = "" if before_id is None else "AND t.id < %s "
    cursor.execute(f"SELECT t.id FROM {corpus.table} t WHERE t.search_vector @@ {tsquery} AND {where} "
                   f"AND t.id > %s {before}ORDER BY {order} DESC LIMIT %s",
                   [*params, *where_params, after_id, *([] if before_id is None else [before_id]), limit])
    return [row[0] for row in cursor.fetchall()]


def _from_index(cursor, corpus, tsquery: str, params: list, filters: dict, step: plan.Pass, walk: float,
                max_id: int) -> list[int]:
    """The newest `limit` matches from the GIN index, newest rows first: those among the last
    INDEX_WINDOW × `walk` ids (where about INDEX_WINDOW × limit matches are), then WINDOW_GROWTH times
    as many older ids, and so on while matches are missing. Sorting by id needs every match's row from
    the heap; bounded by the id range, the index hands over only the recent ones (a word in 3,800 rows:
    260 heap blocks instead of 3,700)."""
    found: list[int] = []
    span, before = INDEX_WINDOW * walk, None
    while len(found) < step.limit:
        start = max(int(max_id - span), step.after_id)
        found += _ids(cursor, corpus, tsquery, params, filters, step.limit - len(found), start, by_index=True,
                      before_id=before)
        if start == step.after_id:
            break
        span, before = span * WINDOW_GROWTH, start + 1
    return found


def _walk_rows(step: plan.Pass, df: dict[str, float], max_id: int) -> float | None:
    """How many rows a walk newest first reads to find the pass's `limit` matches (about limit × rows /
    df of its rarest word), or None when no word's frequency is known."""
    known = [df[s] for item in step.words for w in item if (s := stem(w)) in df]
    if not known:
        return None
    return step.limit * max_id / max(min(known), 1.0)


def _agent_wide(filters: dict) -> bool:
    """Whether the filters keep most of an agent's rows (scope all): then the newest ids hold a pass's
    newest matches, and an index pass reads them first (`_from_index`)."""
    return not any(column_of(column) in NARROWING for column in filters)


def _by_index(step: plan.Pass, df: dict[str, float], max_id: int, filters: dict) -> bool:
    """Whether the pass's matches should come from the GIN index (then sorted) rather than from walking
    the table newest first and testing each row's vector, which the planner prefers for any LIMIT.

    When the walk costs more: it reads about limit × rows / df rows to find `limit` matches (for a word
    in 1 row of 1,000, 80,000 rows and 25 ms for 80 matches), the index hands over df rows, each fetched
    from the heap at about GIN_ROW_COST times the cost of a row walked past. Over an agent's rows the
    index pass fetches only its newest matches and costs WINDOWED_ROW_COST per df (its posting list
    and the ids of its window): a word in 7,800 rows took 8.7 ms walked, 3.5 ms so; one in 19,900 rows
    2.2 ms walked, 4.3 ms so. (One conversation: `_in_conversation`.)
    """
    walk = _walk_rows(step, df, max_id)
    cost = WINDOWED_ROW_COST if _agent_wide(filters) else GIN_ROW_COST
    return walk is not None and cost * step.limit * max_id / walk < walk


def _in_conversation(cursor, corpus, tsquery: str, params: list, filters: dict, step: plan.Pass,
                     walk: float | None) -> list[int]:
    """The newest `limit` matches in one conversation: a common word's from the conversation's newest
    rows, walked (at most WALK_BOUND × the rows expected), the rest from `messages_chat_search_idx`.

    The index pass fetches every match of the conversation from the heap to sort it: a word in every
    other row of a 40,000-message conversation is 16,000 heap blocks (250 ms), against 200 rows walked.
    Beside the conversation's other columns the planner also preferred intersecting the word's whole
    posting list with the conversation's window index (41,000 entries, 25 ms before a row is read), so
    the index pass asks only for the chat id and the vector in a fenced subquery (OFFSET 0) and applies
    the filters outside it.
    """
    where, where_params = where_sql("t", filters)
    found: list[int] = []
    if walk is not None and walk <= WALK_ROWS:
        cursor.execute(f"SELECT w.id FROM (SELECT t.id, t.search_vector FROM {corpus.table} t WHERE {where} "
                       f"AND t.id > %s ORDER BY t.id DESC LIMIT %s) w WHERE w.search_vector @@ {tsquery} "
                       f"ORDER BY w.id DESC LIMIT %s",
                       [*where_params, step.after_id, int(walk * WALK_BOUND) + step.limit, *params, step.limit])
        found = [row[0] for row in cursor.fetchall()]
        if len(found) >= step.limit:
            return found
    older = "AND t.id < %s" if found else ""
    cursor.execute(f"SELECT t.id FROM (SELECT * FROM {corpus.table} t WHERE t.chat_id = %s AND "
                   f"t.search_vector @@ {tsquery} AND t.id > %s {older} OFFSET 0) t WHERE {where} "
                   f"ORDER BY t.id DESC LIMIT %s",
                   [filters["chat_id"], *params, step.after_id, *found[-1:], *where_params, step.limit - len(found)])
    return found + [row[0] for row in cursor.fetchall()]


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


def _document_frequencies(cursor, corpus, query: Query, max_id: int, *,
                          phrase_words: bool = False) -> dict[str, float]:
    """How many rows hold each term: from the planner's statistics for a common lexeme, else counted
    through the GIN index up to COUNT_PROBE rows (each a heap block to visit; a word outside the
    statistics is rarer than every word in them, and one with more matches than the probe is placed
    between the two). Never `ORDER BY id … LIMIT`: for a rare word the planner may walk the whole
    table backwards looking for it."""
    out, missing = {}, []
    for term in _phrase_words(query) if phrase_words else query.terms:
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
    counted = []
    for term in missing:
        found = lexemes.get(term.word) or []
        if phrase_words and not found:
            continue  # a stop word of the `english` configuration: the phrase's tsquery leaves it out
        if found and all(lexeme in shares for lexeme in found):
            out[term.stem] = min(shares[lexeme] for lexeme in found) * max_id
        else:
            counted.append(term)
    counts = _probe_counts(cursor, corpus, [t.word for t in counted])
    for term in counted:
        count = counts.get(term.word, 0)
        # Beyond the probe, somewhere below the least common word of the statistics: in between.
        out[term.stem] = float(count) if count < COUNT_PROBE else max(float(COUNT_PROBE),
                                                                      (COUNT_PROBE * least * max_id) ** 0.5)
    for term in missing:
        if term.stem in out:
            plan.document_frequencies.put((connection.alias, corpus.table, term.stem), max_id, out[term.stem])
    return out


def _probe_counts(cursor, corpus, words: list[str]) -> dict[str, int]:
    """Each word's rows counted through the GIN index up to COUNT_PROBE, all words in one statement."""
    if not words:
        return {}
    cursor.execute(f"SELECT w, (SELECT count(*) FROM (SELECT 1 FROM {corpus.table} t WHERE t.search_vector @@ "
                   f"phraseto_tsquery('{CONFIG}', w) LIMIT %s) AS hits) FROM unnest(%s::text[]) AS w",
                   [COUNT_PROBE, words])
    return dict(cursor.fetchall())


def _phrase_words(query: Query) -> list[Term]:
    """The words of the quoted phrases that are not terms (our stop words): they size the phrase
    passes only, not the ranking, as on SQLite."""
    terms = {t.stem for t in query.terms}
    words = {stem(w): w for phrase in query.phrases for w in phrase if stem(w) not in terms}
    return [Term(word, s, 1.0) for s, word in words.items()]


def _ranked(cursor, corpus, query: Query, ids: list[int], filters: dict, idfs: dict, limit: int):
    parts, params = [], []
    for term in query.terms:
        sql, p = _tsquery((term.word,))
        parts.append(f"%s::float8 * (t.search_vector @@ {sql})::int")
        params += [term.weight * idfs.get(term.stem, 1.0), *p]
    for phrase in query.phrases:
        sql, p = _tsquery(phrase)
        parts.append(f"%s::float8 * (t.search_vector @@ {sql})::int")
        params += [sum(idfs.get(s, 1.0) for s in phrase), *p]
    any_sql, any_params = _any(query)
    where, where_params = where_sql("t", filters)
    text = " || ': ' || ".join(f"t.{c}" for c in corpus.text_columns)
    # In float8: numeric arithmetic (extract() returns numeric) cost 2 ms over 300 candidates.
    age_days = f"extract(epoch from (%s - t.{corpus.time_column}))::float8 / 86400.0"
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


def following(ids: list[int], filters: dict, count: int) -> dict[int, list[tuple[int, str]]]:
    """The next `count` messages passing `filters` after each of `ids` in its conversation (id, content),
    in one statement: per hit, the conversation index walked from the hit's (created_at, id) on.

    Inside a LATERAL with its own LIMIT the planner keeps that walk; a statement per hit with the
    filters beside the conversation's columns had it misjudge them (correlated columns) and sort a
    long conversation's rows first (30,000 heap blocks, 280 ms, for one of 40,000 messages).
    """
    where, params = where_sql("m", filters)
    sql = (
        "SELECT h.id, r.id, r.content FROM messages h CROSS JOIN LATERAL (SELECT m.id, m.content, m.created_at "
        "FROM messages m WHERE m.agent_id = h.agent_id AND m.channel = h.channel AND m.chat_id = h.chat_id "
        "AND m.thread_scope = h.thread_scope AND (m.created_at, m.id) > (h.created_at, h.id) AND "
        f"{where} ORDER BY m.created_at, m.id LIMIT %s) r WHERE h.id = ANY(%s) ORDER BY h.id, r.created_at, r.id")
    out: dict[int, list[tuple[int, str]]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, count, list(ids)])
        for hit_id, reply_id, content in cursor.fetchall():
            out.setdefault(hit_id, []).append((reply_id, content))
    return out


def search(corpus, query: Query, filters: dict, limit: int) -> list[rank.Scored]:
    with connection.cursor() as cursor:
        if query.require_all:
            return _every_word(cursor, corpus, query, filters, limit)
        cursor.execute(f"SELECT max(id) FROM {corpus.table}")
        max_id = cursor.fetchone()[0] or 0
        if not max_id:
            return []
        df = _document_frequencies(cursor, corpus, query, max_id)
        # Phrase words that are not terms (stop words) size the phrase passes only, not the ranking.
        sizes = {**df, **_document_frequencies(cursor, corpus, query, max_id, phrase_words=True)}

        def run(step: plan.Pass) -> list[int]:
            sql, params = _all(step.words)
            if isinstance(filters.get("chat_id"), str):
                return _in_conversation(cursor, corpus, sql, params, filters, step, _walk_rows(step, sizes, max_id))
            if not _by_index(step, sizes, max_id, filters):
                return _ids(cursor, corpus, sql, params, filters, step.limit, step.after_id)
            if _agent_wide(filters):
                return _from_index(cursor, corpus, sql, params, filters, step, _walk_rows(step, sizes, max_id), max_id)
            return _ids(cursor, corpus, sql, params, filters, step.limit, step.after_id, by_index=True)

        ids, cut = plan.collect(plan.passes(query, sizes, max_id), run)
        if not ids and (fallback := plan.fallback(query, sizes)):  # the passes apply the filters
            ids, _ = plan.collect(fallback, run)
            cut = True  # still nothing: the exhaustive pass
        if cut and len(ids) < limit:
            sql, params = _any(query)
            ids += [i for i in _ids(cursor, corpus, sql, params, filters, EXHAUSTIVE_LIMIT) if i not in set(ids)]
        if not ids:
            return []
        idfs = {stem: rank.idf(value, max_id) for stem, value in df.items()}
        return _ranked(cursor, corpus, query, ids, filters, idfs, limit)
