"""How a query is answered within a fixed budget, on any database: document frequencies and passes.

A plain `ORDER BY bm25 LIMIT 20` ranks every match, and a question with a common word matches a good
part of a million messages. Instead each backend runs a few bounded index queries ("passes"), newest
matches first, chosen from the query's rarest terms:

1. each quoted phrase;
2. all content terms together (the 4 rarest), then every pair of the 3 rarest;
3. each term alone, rarest first, until the candidate budget is spent. A very common term is skipped
   when the query has a rarer one: it would only bring messages that share one weak word.

The candidates are then ranked exactly (`memory.search.rank` on SQLite, `ts_rank_cd` on PostgreSQL).
Document frequencies come from the same kind of bounded probe (the newest DF_PROBE matches of the term:
their count when there are fewer, else an estimate from how far back they reach) and are cached per
process while the table grows by less than 1 %.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from dataclasses import dataclass

from fermix_site import generations
from memory.search.text import Query, Term, stem

DF_PROBE = 1000
PHRASE_LIMIT = 100
ALL_TERMS_LIMIT = 60
PAIR_LIMIT = 40
TERM_LIMIT = 80
CANDIDATE_BUDGET = 240
SCAN_BUDGET = 10_000  # postings a conjunction may read (about 2 ms)
SEEK_BUDGET = 1_000  # steps into the other lists a scoped conjunction may make (about 5 ms)
SELECTIVE_SCOPE = 0.1  # a scope token in at most 10 % of the rows narrows the index passes
VERY_COMMON = 0.05  # a term in more than 5 % of the rows
CACHE_FROM_ROWS = 20_000  # below this a probe is cheaper than being wrong about a changed table
CACHE_SECONDS = 600
CACHE_GROWTH = 0.01


@dataclass(frozen=True)
class Pass:
    words: tuple[tuple[str, ...], ...]  # each item a word or phrase; the pass needs all of them
    limit: int
    after_id: int = 0  # only rows with a larger id: bounds the postings a conjunction reads
    before_id: int | None = None  # only rows with a smaller id (a time span's, `within`)


def _window(items, df: dict[str, float], total: float, scope_df: float | None = None) -> int:
    """Where a conjunction starts reading so that it reads a bounded share of its rarest list.

    A conjunction of two mid-frequency words that rarely meet would read both posting lists to the
    end (tens of milliseconds at a million rows); limited to the newest rows that hold SCAN_BUDGET
    postings of the rarer it stays cheap, and the single-word passes still reach old messages of the
    rare words. Within a scope (one owner's or one conversation's rows, itself a list in the
    conjunction), each posting of the rarest list costs a step or a seek in every other list (about
    4.5 µs at a million rows: a phrase of common words in a large owner's rows took 15 ms), so there
    the rarest is read for at most SEEK_BUDGET steps, newest first.
    """
    lists = [df[stem(w)] for item in items for w in item if stem(w) in df]
    budget = SCAN_BUDGET
    if scope_df is not None:
        lists.append(scope_df)
        if len(lists) > 1:
            budget = SEEK_BUDGET / (len(lists) - 1)
    if not lists:
        return 0
    rarest = min(lists)
    if rarest <= budget:
        return 0
    return int(total - total * budget / rarest)


def estimate_df(newest_ids: list[int], probe: int, max_id: int) -> float:
    """Document frequency from the newest `probe` matching ids (descending) of a table with ids ≤ max_id."""
    if len(newest_ids) < probe:
        return float(len(newest_ids))
    reach = max(max_id - newest_ids[-1] + 1, 1)
    return probe * max_id / reach


def passes(query: Query, df: dict[str, float], total: float, scope_df: float | None = None) -> list[Pass]:
    """The bounded index queries for `query`, in the order they should fill the candidate budget.

    `scope_df`: how many rows the scope restriction the passes carry admits (None: no restriction).
    """
    terms = sorted((t for t in query.terms if df.get(t.stem, 0) > 0), key=lambda t: df[t.stem])
    if query.require_all:
        items = tuple((t.word,) for t in query.terms)
        return [Pass(items, TERM_LIMIT, _window(items, df, total, scope_df))] if len(terms) == len(query.terms) else []
    plan = [Pass((phrase,), PHRASE_LIMIT, _window([phrase], df, total, scope_df)) for phrase in query.phrases]
    if len(terms) > 1:
        items = tuple((t.word,) for t in terms[:4])
        plan.append(Pass(items, ALL_TERMS_LIMIT, _window(items, df, total, scope_df)))
    if len(terms) > 2:
        for a, b in itertools.combinations(terms[:3], 2):
            items = ((a.word,), (b.word,))
            plan.append(Pass(items, PAIR_LIMIT, _window(items, df, total, scope_df)))
    plan += [Pass(((t.word,),), TERM_LIMIT) for t in _singles(terms, df, total)]
    return plan


def within(step: Pass, total: int, span: tuple[int, int] | None) -> Pass:
    """`step` inside the ids of a time span (`memory.days`; None: no span). A window (`after_id`, the
    newest ids of `total`) keeps its length, counted down from the span's newest id."""
    if span is None:
        return step
    low, high = span
    after = low - 1
    if step.after_id:
        after = max(after, high - (total - step.after_id))
    return dataclasses.replace(step, after_id=after, before_id=high + 1)


def fallback(query: Query, df: dict[str, float]) -> list[Pass]:
    """When the plan found nothing in scope: each word alone, the very common ones it skipped too (a word
    rare elsewhere may be absent here); for a query of stop words only, each of them when every one
    occurs somewhere. A query whose words are in scope never answers nothing."""
    if query.require_all and any(df.get(t.stem, 0) <= 0 for t in query.terms):
        return []
    return [Pass(((t.word,),), TERM_LIMIT) for t in query.terms]


def _singles(terms: list[Term], df: dict[str, float], total: float) -> list[Term]:
    # A term with at most TERM_LIMIT matches is fetched whole by its pass, however small the table.
    rare = [t for t in terms if df[t.stem] <= max(VERY_COMMON * total, TERM_LIMIT)]
    return rare or terms[:1]


class DocumentFrequencies:
    """Per-process cache of document frequencies by (table, stem), valid while the table barely grew."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str, str], tuple[float, int, float]] = {}

    def get(self, key: tuple[str, str, str], max_id: int) -> float | None:
        if max_id < CACHE_FROM_ROWS:
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, at_max_id, expires = entry
        if time.monotonic() > expires or max_id > at_max_id * (1 + CACHE_GROWTH) or max_id < at_max_id:
            return None
        return value

    def put(self, key: tuple[str, str, str], max_id: int, value: float) -> None:
        if max_id < CACHE_FROM_ROWS:
            return
        with self._lock:
            if len(self._entries) > 100_000:
                self._entries.clear()
            self._entries[key] = (value, max_id, time.monotonic() + CACHE_SECONDS)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


document_frequencies = DocumentFrequencies()
generations.also_clear(document_frequencies.clear)


def collect(plan: list[Pass], run, budget: int = CANDIDATE_BUDGET, *, batched: bool = False) -> tuple[list[int], bool]:
    """Run passes in order until `budget` candidate ids are collected: (ids, whether any pass was cut).

    `run(step)` returns a pass's ids; with `batched`, `run(steps)` returns each pass's ids, and is handed
    every pass that runs whatever those before it find (their limits together cannot fill the budget),
    so a backend may send them as one statement."""
    seen: dict[int, None] = {}
    cut = False
    first = 0
    while first < len(plan):
        last, worst = first + 1, len(seen) + plan[first].limit
        while batched and last < len(plan) and worst < budget:
            worst += plan[last].limit
            last += 1
        steps = plan[first:last]
        for step, ids in zip(steps, run(steps) if batched else [run(steps[0])], strict=True):
            cut = cut or len(ids) >= step.limit
            for i in ids:
                seen.setdefault(i, None)
            if len(seen) >= budget:
                return list(seen), True
        first = last
    return list(seen), cut
