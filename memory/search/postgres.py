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

Each pass takes its newest matches the cheapest way its words' frequency allows, since a pass's cost is
the heap rows it visits (the planner, left alone, walks for any LIMIT or sorts every match):

- a frequent word is walked newest first, the table's rows or one conversation's (`_walk_rows`:
  about limit × rows / the rows expected to hold all the pass's words; at most WALK_BOUND times that,
  then the index: over the agent's rows at least WALK_FLOOR rows, `_walked`), in a time span the span's
  ids (`_walked_in_span`);
- a sparse one comes from the GIN index; over an agent's rows newest ids first (`_windows`): sorting
  by id needs each match's row, so the ids where about INDEX_WINDOW × limit matches are go first, their
  pages picked by `messages_span_brin` (migration 0014) for a word in at most about 4,000 rows of a
  million, then older ids sized by the density found;
- in one conversation from `messages_chat_search_idx` alone, the other filters applied outside a
  fenced subquery (`_in_conversation`);
- for one owner from `messages_owner_search_idx` (migration 0016), which intersects the owner's posting
  list with the words' before a row is read; for an owner holding far more rows than the pass's words,
  from the words' matches read and filtered (`_fenced`), and for an owner of most of the rows (a
  one-person assistant) as over the agent's, newest ids first, the owner filtered outside each window
  (`_most_rows`);
- a quoted phrase's stop words size its pass (`english` keeps "weren", in 45 % of rows).

A statement costs a round trip and its planning (about 0.3 ms) however little it reads, so a query
sends few: the table's size and every word's lexemes in one, the rare words' probe in one, and the
passes that run whatever the earlier ones find in one (`_run`, UNION ALL), about 8 in all for a
question over every conversation where there were 20.

The replies after the best hits are one statement (`following`). Measured in docs/performance.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from django.db import connection
from django.utils import timezone

from fermix_site import generations
from memory import days
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
COUNT_PROBE = 50
WALK_ROWS = 1_000  # in one conversation a pass walks its newest rows when it expects its matches within these
WALK_BOUND = 4  # ...and reads at most this many times the rows expected before asking the index
WALK_FLOOR = 10_000  # over an agent's rows a walk reads at least these (about what a common word's postings cost)
INDEX_WINDOW = 2  # an index pass first reads the ids where about twice its limit of matches are
WINDOW_GROWTH = 4  # ...then older ids by the density found, or four times as many when it found none
SUMMARISED = ("messages",)  # tables with page summaries of `id + 0` (migration 0014)
OWNER_INDEXED = ("messages",)  # tables with an index of (owner, vector): `messages_owner_search_idx`
SUMMARY_SPAN = 10  # an index pass narrows by the page summaries while its window has 10 ids a match or more
CORRELATION = 32  # a pass of several words expects at least 1/32 of its rarest word's rows to hold them all
OWNER_FENCE = 150  # an owner of more rows than 150 a match of the pass: read the matches, filter (`_fenced`)


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


def _ids_sql(corpus, tsquery: str, params: list, filters: dict, limit: int, after_id: int = 0, *,
             by_index: bool = False, summarised: bool = False, before_id: int | None = None,
             fenced: bool = False) -> tuple[str, list]:
    """The newest `limit` ids matching `tsquery` in (after_id, before_id). `by_index`: the matches are sparse,
    so they are taken from the GIN index and sorted (`id + 0` is no order the planner could walk).
    `summarised`: the bounds too are on `id + 0`, which only `messages_span_brin` (migration 0014) serves,
    so the GIN bitmap is narrowed to the pages of the id window before the heap is read. `fenced`: the
    matches are read in a subquery (OFFSET 0) and the filters applied outside it (`_fenced`)."""
    where, where_params = where_sql("t", filters)
    key = "t.id + 0" if summarised else "t.id"
    before = "" if before_id is None else f"AND {key} < %s "
    bounds = [after_id, *([] if before_id is None else [before_id])]
    if fenced:
        return (f"SELECT t.id FROM (SELECT * FROM {corpus.table} t WHERE t.search_vector @@ {tsquery} "
                f"AND {key} > %s {before}OFFSET 0) t WHERE {where} ORDER BY t.id + 0 DESC LIMIT %s",
                [*params, *bounds, *where_params, limit])
    return (f"SELECT t.id FROM {corpus.table} t WHERE t.search_vector @@ {tsquery} AND {where} "
            f"AND {key} > %s {before}ORDER BY {'t.id + 0' if by_index else 't.id'} DESC LIMIT %s",
            [*params, *where_params, *bounds, limit])


def _walked_in_span(corpus, tsquery: str, params: list, filters: dict, step: plan.Pass) -> tuple[str, list]:
    """A walked pass inside a time span's ids (`plan.within`): the rows between them newest first, the
    filters' time bounds applied outside a fenced subquery (OFFSET 0), which hands its rows over in its
    order to the LIMIT. The ids already bound the time; beside them the planner took the bounds for a
    second narrowing (it expected 32 of a common word's 649 matches in a month) and read the month's
    pages through `messages_span_brin`, every page lossy: 933 pages, 15,796 rows rechecked, 12–17 ms,
    where the walk reads 5,554 rows in 2–4 ms."""
    timed = {k: v for k, v in filters.items() if column_of(k) == corpus.time_column}
    inner, inner_params = where_sql("t", {k: v for k, v in filters.items() if k not in timed})
    outer, outer_params = where_sql("w", timed)
    bounds = [step.after_id, *([] if step.before_id is None else [step.before_id])]
    before = "AND t.id < %s " if len(bounds) > 1 else ""
    return (f"SELECT w.id FROM (SELECT t.id, t.{corpus.time_column} FROM {corpus.table} t WHERE "
            f"t.search_vector @@ {tsquery} AND {inner} AND t.id > %s {before}ORDER BY t.id DESC OFFSET 0) w "
            f"WHERE {outer} LIMIT %s",
            [*params, *inner_params, *bounds, *outer_params, step.limit])


def _ids(cursor, corpus, tsquery: str, params: list, filters: dict, limit: int, after_id: int = 0,
         before_id: int | None = None) -> list[int]:
    cursor.execute(*_ids_sql(corpus, tsquery, params, filters, limit, after_id, before_id=before_id))
    return [row[0] for row in cursor.fetchall()]


# A pass's statements: given the ids the pass found so far, its next statement (sql, params; newest ids
# first), or None when it has read all it may.
Statements = Callable[[list[int]], tuple[str, list] | None]


def _in_order(*statements: Callable[[list[int]], tuple[str, list]]) -> Statements:
    pending = list(statements)
    return lambda found: pending.pop(0)(found) if pending else None


def _run(cursor, passes: list[tuple[plan.Pass, Statements]]) -> list[list[int]]:
    """Each pass's ids: the first statement of every pass in one round trip (UNION ALL), then the next
    statements of each pass still short of its limit, one by one. A statement costs a round trip and
    its planning (about 0.3 ms) however little it reads."""
    first = [statements([]) for _, statements in passes]
    if len(first) == 1:
        cursor.execute(*first[0])
        found = [[row[0] for row in cursor.fetchall()]]
    else:
        cursor.execute(" UNION ALL ".join(f"(SELECT {n} AS pass, p.id FROM ({sql}) p)" for n, (sql, _) in
                                          enumerate(first)), [param for _, params in first for param in params])
        found = [[] for _ in passes]
        for n, pk in cursor.fetchall():
            found[n].append(pk)
        for ids in found:
            ids.sort(reverse=True)
    for (step, statements), ids in zip(passes, found, strict=True):
        while len(ids) < step.limit and (statement := statements(ids)) is not None:
            cursor.execute(*statement)
            ids += [row[0] for row in cursor.fetchall()]
    return found


def _walked(corpus, tsquery: str, params: list, filters: dict, step: plan.Pass, after_id: int, top: int,
            fenced: bool = False) -> tuple[str, list]:
    """The pass's newest `limit` matches among the ids in (after_id, top], walked newest first: the rows
    come from a subquery ordered by id whose LIMIT is the ids' count, so the planner walks the primary
    key (an index of the pass's words would read all their matches), and each row's vector is tested
    outside it. `fenced`: the filters too are tested outside (`_most_rows`)."""
    inner, inner_params = ("TRUE", []) if fenced else where_sql("t", filters)
    outer, outer_params = where_sql("w", filters) if fenced else ("TRUE", [])
    before = [] if step.before_id is None else [step.before_id]
    return (f"SELECT w.id FROM (SELECT t.* FROM {corpus.table} t WHERE {inner} AND t.id > %s "
            f"{'AND t.id < %s ' if before else ''}ORDER BY t.id DESC LIMIT %s) w "
            f"WHERE w.search_vector @@ {tsquery} AND {outer} ORDER BY w.id DESC LIMIT %s",
            [*inner_params, after_id, *before, max(top - after_id, 1), *params, *outer_params, step.limit])


def _windows(corpus, tsquery: str, params: list, filters: dict, step: plan.Pass, walk: float,
             max_id: int, fenced: bool = False, walked_first: bool = False) -> Statements:
    """The newest `limit` matches from the GIN index, newest rows first: those among the last
    INDEX_WINDOW × `walk` ids (where about INDEX_WINDOW × limit matches are), then, while matches are
    missing, older ids where INDEX_WINDOW times as many as are missing should be at the density found
    so far (WINDOW_GROWTH times the ids read when none was found). Sorting by id needs every match's
    row from the heap; bounded by the id range, the index hands over only the recent ones (a word in
    1,800 rows: 81 heap blocks instead of 1,780 for its newest 40). A fixed fourfold growth read 300
    matches of a word for the last one of 80.

    The pages of the window come from `messages_span_brin` while the window spans SUMMARY_SPAN ids or
    more for each row holding the pass's words (about 4,000 rows for a single word at a million). Past
    that the planner intersects the two bitmaps page by page and rechecks every row of a page with a
    match (4,700 rows for a word in 9,600), which costs more than fetching the word's own rows.

    `fenced`: the filters are applied outside the window (an owner of most of the rows, `_most_rows`).

    `walked_first`: the pass's words are common enough to be walked (`_by_index`), and the first window is
    walked newest first (`_walked`), WALK_BOUND times the rows expected to hold its matches; the index
    reads on from where the walk stopped, at the density it found. An unbounded walk costs whatever the
    guess of the words' rows misses by: a phrase of "weren" (45 % of rows) and "shouldn" (19,862) is
    in 498 rows, not 19,862, and its walk read 200,000 rows (110 ms) for 100 matches."""
    read_from: list[int] = []  # where the last window started
    summarised = corpus.table in SUMMARISED and INDEX_WINDOW * walk >= SUMMARY_SPAN * step.limit * max_id / walk
    top = max_id if step.before_id is None else step.before_id - 1  # a time span's newest id

    def statement(found: list[int]) -> tuple[str, list] | None:
        if walked_first and not read_from:
            read_from.append(max(int(top - max(WALK_BOUND * walk, WALK_FLOOR)), step.after_id))
            return _walked(corpus, tsquery, params, filters, step, read_from[-1], top, fenced)
        if not read_from:
            span, before = INDEX_WINDOW * walk, step.before_id
        elif read_from[-1] <= step.after_id:
            return None
        else:
            read = top - read_from[-1]
            missing = step.limit - len(found)
            span = read + (INDEX_WINDOW * missing * read / len(found) if found else read * (WINDOW_GROWTH - 1))
            before = read_from[-1] + 1
        read_from.append(max(int(top - span), step.after_id))
        return _ids_sql(corpus, tsquery, params, filters, step.limit - len(found), read_from[-1], by_index=True,
                        summarised=summarised, before_id=before, fenced=fenced)

    return statement


def _item_rows(step: plan.Pass, df: dict[str, float]) -> list[float]:
    """The rows expected to hold each item of the pass (a phrase: its rarest word's), where a word's
    frequency is known."""
    return [min(known) for item in step.words if (known := [df[s] for w in item if (s := stem(w)) in df])]


def _walk_rows(step: plan.Pass, df: dict[str, float], max_id: int) -> float | None:
    """How many rows a walk newest first reads to find the pass's `limit` matches (about limit × rows /
    the rows expected to hold all its items), or None when no word's frequency is known.

    A phrase holds no more rows than its rarest word. Items are taken as independent, but never as
    rarer than 1/CORRELATION of the rarest: words that meet are rarely independent, and the guess sizes
    an index pass's first window (CORRELATION times the matches it needs when the words always meet).
    Taken as rare as its rarest item, a pair of words in 1,800 rows each was read in three windows of
    ids, and pairs of common words that rarely meet were walked newest first (19–22 ms a pass)."""
    items = _item_rows(step, df)
    if not items:
        return None
    rarest = max(min(items), 1.0)
    together = max_id
    for share in items:
        together *= min(share / max_id, 1.0)
    return step.limit * max_id / max(together, rarest / CORRELATION, 1.0)


def _agent_wide(filters: dict, most_rows: bool = False) -> bool:
    """Whether the filters keep most of an agent's rows (scope all, or an owner of most of them:
    `most_rows`): then the newest ids hold a pass's newest matches, and an index pass reads them first
    (`_windows`)."""
    narrowing = {column_of(column) for column in filters} & set(NARROWING)
    return not narrowing or (most_rows and narrowing == {"owner_id"})


def _most_rows(owner_rows: float, max_id: int) -> bool:
    """Whether an owner holds most of the table's rows (a one-person assistant), half of them or more.
    Then an owner's pass is an agent's (`_windows`, the first window widened by the owner's share), its
    owner filter applied outside each window: a window reads at most twice as many matches as the
    owner's. Read whole (`_fenced`), the pass fetched every match of its words from the heap to sort
    them, and from `messages_owner_search_idx` every match of the owner's (docs/performance.md).
    `owner_rows`: as for `_fenced`."""
    return max_id > 0 and owner_rows * 2 >= max_id


def _by_index(step: plan.Pass, df: dict[str, float], max_id: int, filters: dict, most_rows: bool = False) -> bool:
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
    cost = WINDOWED_ROW_COST if _agent_wide(filters, most_rows) else GIN_ROW_COST
    return walk is not None and cost * step.limit * max_id / walk < walk


def _fenced(step: plan.Pass, df: dict[str, float], owner_rows: float) -> bool:
    """Whether an owner's pass should read the words' matches and filter them by owner (in a fenced
    subquery, which keeps the planner from the owner's indexes) rather than take the owner's matches
    from `messages_owner_search_idx`. That index walks the owner's posting list beside the words': for
    an owner of 42,236 rows of a million and a word in 2,276 rows, 1.3 ms for the owner's 78 matches,
    against 11.7 ms reading the word's 2,276 and filtering. But the owner's list costs about 1.7 ns an
    entry, so for an owner of most of the agent's rows reading the word's matches is cheaper: an owner of
    900,000 rows and a word in 194, 1.9 ms against 0.4; in 5,781, 9.6 against 5.2. Measured for owners
    of 100,000 to 900,000 rows of a million, reading the matches is the faster of the two while the owner
    holds more than about OWNER_FENCE rows a match (docs/performance.md). `owner_rows`: the owner's rows
    by the planner's statistics (an owner outside them is smaller than every owner in them, and is not
    fenced). An owner of most of the rows reads only the newest of the matches where it can
    (`_most_rows`)."""
    items = _item_rows(step, df)
    return bool(items) and owner_rows > OWNER_FENCE * max(min(items), 1.0)


def _in_conversation(corpus, tsquery: str, params: list, filters: dict, step: plan.Pass,
                     walk: float | None) -> Statements:
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
    before = [step.before_id] if step.before_id is not None else []
    newer = "AND t.id < %s " if before else ""

    def walked(found: list[int]) -> tuple[str, list]:
        return (f"SELECT w.id FROM (SELECT t.id, t.search_vector FROM {corpus.table} t WHERE {where} "
                f"AND t.id > %s {newer}ORDER BY t.id DESC LIMIT %s) w WHERE w.search_vector @@ {tsquery} "
                f"ORDER BY w.id DESC LIMIT %s",
                [*where_params, step.after_id, *before, int(walk * WALK_BOUND) + step.limit, *params, step.limit])

    def indexed(found: list[int]) -> tuple[str, list]:
        older = "AND t.id < %s" if found or before else ""
        return (f"SELECT t.id FROM (SELECT * FROM {corpus.table} t WHERE t.chat_id = %s AND "
                f"t.search_vector @@ {tsquery} AND t.id > %s {older} OFFSET 0) t WHERE {where} "
                f"ORDER BY t.id DESC LIMIT %s",
                [filters["chat_id"], *params, step.after_id, *(found[-1:] or before), *where_params,
                 step.limit - len(found)])

    return _in_order(walked, indexed) if walk is not None and walk <= WALK_ROWS else _in_order(indexed)


class _CommonValues:
    """The planner's statistics of a column (`pg_stats`, kept by ANALYZE): the share of rows holding each of
    its most common values (of a vector column, `elements`: its ~1,000 most common lexemes), and the
    smallest such share (a value outside them is rarer)."""

    def __init__(self, column: str, elements: bool = False):
        self.column, self.elements = column, elements
        self._entries: dict[tuple[str, str], tuple[float, dict[str, float], float]] = {}
        generations.also_clear(self.clear)

    def get(self, cursor, table: str) -> tuple[dict[str, float], float]:
        key = (connection.alias, table)
        entry = self._entries.get(key)
        if entry is None or time.monotonic() > entry[0]:
            values, freqs = ("most_common_elems", "most_common_elem_freqs") if self.elements else \
                ("most_common_vals", "most_common_freqs")
            cursor.execute(f"SELECT {values}::text::text[], {freqs} FROM pg_stats WHERE schemaname = current_schema() "
                           f"AND tablename = %s AND attname = %s", [table, self.column])
            row = cursor.fetchone()
            elems, freqs = (row[0] or [], row[1] or []) if row else ([], [])
            shares = dict(zip(elems, freqs, strict=False))
            # Element statistics end with the least and greatest shares (and the null share) after the list.
            if self.elements:
                least = freqs[len(elems)] if len(freqs) > len(elems) else 0.0
            else:
                least = min(freqs, default=0.0)
            entry = self._entries[key] = (time.monotonic() + plan.CACHE_SECONDS, shares, least)
        return entry[1], entry[2]

    def clear(self) -> None:
        """Forget the statistics read: the next `get` reads them again (after an ANALYZE)."""
        self._entries.clear()


common_lexemes = _CommonValues("search_vector", elements=True)
common_owners = _CommonValues("owner_id")


def _document_frequencies(cursor, corpus, query: Query) -> tuple[int, dict[str, float], dict[str, float]]:
    """The table's highest id (its size, for idf), how many rows hold each term, and each word sizing a
    pass (the terms, and the phrases' other words): from the planner's statistics for a common lexeme,
    else from a probe of the GIN index (`_probe`; a word outside the statistics is rarer than every
    word in them). The id and every word's lexemes come in one statement, as each statement costs a
    round trip and its planning. Never `ORDER BY id … LIMIT`: for a rare word the planner may walk the
    whole table backwards looking for it."""
    words = [*query.terms, *_phrase_words(query)]
    cursor.execute(f"SELECT (SELECT max(id) FROM {corpus.table}), (SELECT json_object_agg(w, tsvector_to_array("
                   f"to_tsvector('{CONFIG}', w))) FROM unnest(%s::text[]) AS w)", [[t.word for t in words]])
    max_id, lexemes = cursor.fetchone()
    max_id, lexemes = max_id or 0, lexemes or {}
    out, missing = {}, []
    for term in words:
        df = plan.document_frequencies.get((connection.alias, corpus.table, term.stem), max_id)
        if df is None:
            missing.append(term)
        else:
            out[term.stem] = df
    shares, least = common_lexemes.get(cursor, corpus.table) if missing and max_id else ({}, 0.0)
    counted = []
    for term in missing:
        found = lexemes.get(term.word) or []
        if not found and term not in query.terms:
            continue  # a stop word of the `english` configuration: the phrase's tsquery leaves it out
        if found and all(lexeme in shares for lexeme in found):
            out[term.stem] = min(shares[lexeme] for lexeme in found) * max_id
        else:
            counted.append(term)
    probed = _probe(cursor, corpus, [t.word for t in counted])
    for term in counted:
        out[term.stem] = min(probed.get(term.word, 0.0), max(least * max_id, float(COUNT_PROBE)))
    for term in missing:
        if term.stem in out:
            plan.document_frequencies.put((connection.alias, corpus.table, term.stem), max_id, out[term.stem])
    terms = {t.stem for t in query.terms}
    return max_id, {k: v for k, v in out.items() if k in terms}, out


def _probe(cursor, corpus, words: list[str]) -> dict[str, float]:
    """Each word's rows through the GIN index, all words in one statement: counted when fewer than
    COUNT_PROBE, else estimated from how far into the heap its first COUNT_PROBE matches reach. A
    bitmap scan hands rows over in heap order, so when they lie in the first `b` of `pages` blocks
    there are about COUNT_PROBE × pages / b (within 8 % for three words of 1,700–9,600 rows of a million).
    Each match read is a heap block: counting up to 200 read 410 blocks for a query of four words over
    every conversation, and a word past the count was only known to lie between 200 rows and the
    statistics' least common word (the 1,800 rows of one were taken for 570)."""
    if not words:
        return {}
    cursor.execute(f"SELECT w, (SELECT array[count(*), max(b) + 1] FROM (SELECT (t.ctid::text::point)[0] AS b "
                   f"FROM {corpus.table} t WHERE t.search_vector @@ phraseto_tsquery('{CONFIG}', w) LIMIT %s) "
                   f"AS hits), pg_relation_size(%s) / current_setting('block_size')::int FROM unnest(%s::text[]) AS w",
                   [COUNT_PROBE, corpus.table, words])
    out = {}
    for word, (count, reach), pages in cursor.fetchall():
        out[word] = float(count) if count < COUNT_PROBE else COUNT_PROBE * max(pages, reach) / reach
    return out


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
    # A snippet from the beginning of a very long row, as on SQLite (`rank.READ_CHARS`): ts_headline parses
    # all it is given, 119 ms for a message of 512 KiB, and a query shows 20 of them.
    body = f"left({text}, {rank.READ_CHARS})"
    # In float8: numeric arithmetic (extract() returns numeric) cost 2 ms over 300 candidates.
    age_days = f"extract(epoch from (%s - t.{corpus.time_column}))::float8 / 86400.0"
    cursor.execute(
        f"WITH ranked AS (SELECT t.id, {body} AS body, "
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
    cursor.execute(f"SELECT t.id, left({text}, {rank.READ_CHARS}), t.{corpus.time_column} FROM {corpus.table} t "
                   f"WHERE ({words}) AND {where} "
                   f"ORDER BY t.id DESC LIMIT %s", [*(rf"\m{t.word}\M" for t in query.terms), *params, plan.TERM_LIMIT])
    return cursor.fetchall()


def following(ids: list[int], filters: dict, count: int) -> dict[int, list[tuple[int, str]]]:
    """The next `count` messages passing `filters` after each of `ids` in its conversation (id, content),
    in one statement: per hit, the conversation index walked from the hit's (created_at, id) on.

    Inside a LATERAL with its own LIMIT the planner keeps that walk; a statement per hit with the
    filters beside the conversation's columns had it misjudge them (correlated columns) and sort a
    long conversation's rows first (30,000 heap blocks, 280 ms, for one of 40,000 messages). An owner's
    filter is an expression no index serves: beside it the planner intersected the owner's index with the
    chat's and read every row of the hit's conversation (4,466 heap blocks for five hits in an owner's
    conversations of 900 messages) to sort them.
    """
    rest = dict(filters)
    owner = rest.pop("owner_id") if isinstance(filters.get("owner_id"), str) else None
    where, params = where_sql("m", rest)
    if owner is not None:
        where, params = f"{where} AND m.owner_id || '' = %s", [*params, owner]
    sql = (
        f"SELECT h.id, r.id, left(r.content, {rank.READ_CHARS}) FROM messages h CROSS JOIN LATERAL "
        "(SELECT m.id, m.content, m.created_at "
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
        # Phrase words that are not terms (stop words) size the phrase passes only, not the ranking.
        span = days.span_ids(cursor, corpus.table, filters)
        if span and span[0] > span[1]:
            return []  # no message of the agent on the span's days
        max_id, df, sizes = _document_frequencies(cursor, corpus, query)
        if not max_id:
            return []
        owner = filters.get("owner_id")
        owner_rows = 0.0
        if corpus.table in OWNER_INDEXED and isinstance(owner, str) and not isinstance(filters.get("chat_id"), str):
            owner_rows = common_owners.get(cursor, corpus.table)[0].get(owner, 0.0) * max_id
        most_rows = _most_rows(owner_rows, max_id)

        def statements(step: plan.Pass) -> tuple[plan.Pass, Statements]:
            step = plan.within(step, max_id, span)
            sql, params = _all(step.words)
            if isinstance(filters.get("chat_id"), str):
                return step, _in_conversation(corpus, sql, params, filters, step, _walk_rows(step, sizes, max_id))
            by_index = _by_index(step, sizes, max_id, filters, most_rows)
            walk = _walk_rows(step, sizes, max_id)
            if walk is not None and _agent_wide(filters, most_rows) and (by_index or span is None):
                walk *= max_id / owner_rows if most_rows else 1.0
                return step, _windows(corpus, sql, params, filters, step, walk, max_id, fenced=most_rows,
                                      walked_first=not by_index)
            if span is not None and not by_index:
                return step, _in_order(lambda found: _walked_in_span(corpus, sql, params, filters, step))
            fenced = by_index and _fenced(step, sizes, owner_rows)
            return step, _in_order(lambda found: _ids_sql(corpus, sql, params, filters, step.limit, step.after_id,
                                                          by_index=by_index, before_id=step.before_id,
                                                          fenced=fenced))

        def run(steps: list[plan.Pass]) -> list[list[int]]:
            return _run(cursor, [statements(step) for step in steps])

        ids, cut = plan.collect(plan.passes(query, sizes, max_id), run, batched=True)
        if not ids and (fallback := plan.fallback(query, sizes)):  # the passes apply the filters
            ids, _ = plan.collect(fallback, run, batched=True)
            cut = True  # still nothing: the exhaustive pass
        if cut and len(ids) < limit:
            sql, params = _any(query)
            low, high = span or (1, None)
            ids += [i for i in _ids(cursor, corpus, sql, params, filters, EXHAUSTIVE_LIMIT, low - 1,
                                    None if high is None else high + 1) if i not in set(ids)]
        if not ids:
            return []
        idfs = {stem: rank.idf(value, max_id) for stem, value in df.items()}
        return _ranked(cursor, corpus, query, ids, filters, idfs, limit)
