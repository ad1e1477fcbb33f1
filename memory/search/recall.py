"""Recall as `memory_recall` runs it: lexical, semantic or hybrid, aware of time, every result explained.

`recall(corpus, query=…, filters=…, limit=…, mode=…)` reads the time words of the query first
(`memory.search.when`): they narrow the results to their span (those found inside it come first, marked
`time: …`) and leave the lexical query, so a month's name does not match unrelated messages. `after` and
`before` are hard bounds. The lexical ranking is `memory.search.lexical_hits` (the replies after the best
hits included, marked `context: reply`); the semantic one is the nearest vectors (`memory.search.semantic`);
`hybrid` fuses the two by weighted reciprocal rank (the first match of each query word kept near the top).
Each row gets `signals`: `{"lexical_rank", "semantic_rank", "score", "why"}` and `context` (`"reply"` or
None), and the answer says which mode ran and, when a weaker one ran instead, why (`degraded`).
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.db import connection
from django.utils import timezone

from fermix_site.conf import conf
from memory import days, embeddings
from memory.models import Embedding, Message
from memory.search import MAX_LIMIT, Corpus, bridge, lexical_hits, rows_of, semantic, with_replies
from memory.search.filters import where_sql
from memory.search.rank import MARK_END, MARK_START, Scored
from memory.search.text import analyse, stem
from memory.search.when import Span, read_time

logger = logging.getLogger("fermix.memory.recall")

MODES = ("hybrid", "lexical", "semantic")
# Fusion, tuned on bench/recall_eval.py (the variants tried: docs/recall.md).
RRF_K, W_LEXICAL, W_SEMANTIC = 5, 1.0, 1.7
MARKED = re.compile(re.escape(MARK_START) + r"(.+?)" + re.escape(MARK_END))
SPAN_LISTING = 50  # a question that is only a time ("what happened yesterday?") lists its span's rows
# The query is embedded here while the lexical passes run (the model and the database both release the GIL).
_embedding_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fermix-query-embedding")


class _Prefetched:
    """The embedder, with the query's vector already being computed on the pool: `embed_query` of that
    text waits for it (and raises what the model raised) instead of embedding it a second time."""

    def __init__(self, model, text: str):
        self.model, self.text = model, text
        self.model_id, self.dimensions = model.model_id, model.dimensions
        self.vector: Future = _embedding_pool.submit(model.embed_query, text)

    def embed_query(self, text: str):
        return self.vector.result() if text == self.text else self.model.embed_query(text)

    def __getattr__(self, name):
        return getattr(self.model, name)


@dataclass
class Recalled:
    rows: list
    mode: str
    degraded: str | None = None
    spans: list[Span] = field(default_factory=list)

    @property
    def meta(self) -> dict:
        return {"mode": self.mode, "degraded": self.degraded,
                "time": [{"from": s.start.isoformat(), "to": s.end.isoformat(), "label": s.label}
                         for s in self.spans]}


def _bounded(corpus: Corpus, filters: dict, start: datetime | None, end: datetime | None) -> dict:
    bounded = dict(filters)
    column = corpus.time_column
    if start is not None:
        current = bounded.get(f"{column}__gte")
        bounded[f"{column}__gte"] = max(start, current) if current else start
    if end is not None:
        current = bounded.get(f"{column}__lt")
        bounded[f"{column}__lt"] = min(end, current) if current else end
    return bounded


def _listing(corpus: Corpus, filters: dict, limit: int) -> list[Scored]:
    """The rows in the filters' span, oldest first: for a query with no match inside its time span. Messages
    of an owner or of every conversation are read between the span's ids (`memory.days`): only a
    conversation's index orders messages by time, and a day over all conversations read every one of the
    agent's rows (100 ms at a million messages, 3 ms so)."""
    with connection.cursor() as cursor:
        span = None if isinstance(filters.get("chat_id"), str) else days.span_ids(cursor, corpus.table, filters)
        # Between the span's ids by key: the filters must not pick an index of their own (SQLite took the agent's).
        where, params = where_sql("t", filters, by_key=span is not None)
        ids = "t.id >= %s AND t.id <= %s AND " if span else ""
        cursor.execute(f"SELECT t.id FROM {corpus.table} t WHERE {ids}{where} ORDER BY t.{corpus.time_column}, t.id "
                       f"LIMIT %s", [*(span or ()), *params, min(limit, SPAN_LISTING)])
        return [Scored(pk, 0.0, "") for (pk,) in cursor.fetchall()]


def _lexical(corpus: Corpus, text: str, filters: dict, span: dict | None, limit: int,
             cut: list[Scored] | None = None) -> tuple[list, list]:
    """The lexical ranking inside the query's time span (`span`: the filters bounded by it) and outside it;
    `cut` receives the replies the lists left out (`with_replies`)."""
    if span is None:
        return [], lexical_hits(corpus, text, filters, limit, cut=cut)
    has_words = bool(analyse(text))
    # No match inside the span (or no words besides the time): what was said then, in order.
    inside = (lexical_hits(corpus, text, span, limit, cut=cut) if has_words else []) or _listing(corpus, span, limit)
    seen = {h.id for h in inside}
    if not has_words or len(seen) >= limit:  # the span's rows fill the answer: the rest would never show
        return inside, []
    return inside, [h for h in lexical_hits(corpus, text, filters, limit, cut=cut) if h.id not in seen]


def _semantic(corpus: Corpus, model, text: str, filters: dict, span: dict | None, limit: int,
              cut: list[Scored] | None = None):
    """Semantic recall, begun (`semantic.start`: the scope's vectors read, its scores computed on the
    embedding pool beside the lexical passes); the function returned gives the nearest rows inside the
    span and outside it (with the replies after them; `cut` receives those the lists left out), and why
    semantic recall cannot be trusted (or None)."""
    kind = Embedding.Kind.MESSAGE if corpus.model is Message else Embedding.Kind.MEMORY

    def nearest(found: semantic.Neighbours, scope: dict):
        replies = kind == Embedding.Kind.MESSAGE
        return (with_replies(found.hits, scope, limit, cut=cut) if replies else found.hits), found.degraded

    # A span's filters pin the same scope as the rest's: one search, filtered both ways.
    started = semantic.start(kind, model, text, [filters] if span is None else [span, filters], limit,
                             _embedding_pool)

    def finish():
        if span is None:
            hits, degraded = nearest(started()[0], filters)
            return [], hits, degraded
        within, rest = started()
        (inside, first), (outside, second) = nearest(within, span), nearest(rest, filters)
        seen = {h.id for h in inside}
        return inside, [h for h in outside if h.id not in seen], first or second

    return finish


def _marked(hit: Scored) -> list[str]:
    """The words of `hit`'s snippet that matched the query, lower-cased, each once, in order."""
    return list(dict.fromkeys(m.lower() for m in MARKED.findall(hit.snippet)))


def lexical_ranks(lexical: list[Scored]) -> dict[int, int]:
    """Each lexical match's rank in the fusion: its place in the list, or, for the first match of a word no
    match above it had, one place after one match per word already covered. A question of two words
    answered by a message with the rarer one is not lost behind every short message with the other ("who is
    Rui's wife?": the name, which weighs more, in greetings to Rui; "wife" in the answer, below them).
    The replies in the list keep their places and cover no word."""
    ranks, covered = {}, set()
    for place, hit in enumerate(lexical, start=1):
        if hit.reply_to is not None:
            continue
        words = {stem(w) for w in _marked(hit)}
        ranks[hit.id] = min(place, len(covered) + 1) if covered and words - covered else place
        covered |= words
    return ranks


def fuse(lexical: list[Scored], semantic_hits: list[Scored], limit: int, *,
         covering: bool = True, cut: list[Scored] = ()) -> list[tuple[Scored, float]]:
    """One ranking from two, by weighted reciprocal rank: W_LEXICAL / (RRF_K + rank) + W_SEMANTIC / (RRF_K +
    rank), the lexical ranks by `lexical_ranks` when `covering` (else the list's places); a reply stands at
    least its share (`memory.search.FOLLOW_SHARES`) of the row it answers, so the next message stays above
    the one after it, and so does a reply in one list that the other's reply rule found and cut (`cut`).
    Returns (hit, fused score), best first."""
    scores: dict[int, float] = {}
    hits: dict[int, Scored] = {}
    ranks = lexical_ranks(lexical) if covering else {}
    for place, hit in enumerate(lexical, start=1):
        rank = ranks.get(hit.id, place)
        scores[hit.id] = scores.get(hit.id, 0.0) + W_LEXICAL / (RRF_K + rank)
        hits.setdefault(hit.id, hit)
    for rank, hit in enumerate(semantic_hits, start=1):
        scores[hit.id] = scores.get(hit.id, 0.0) + W_SEMANTIC / (RRF_K + rank)
        hits.setdefault(hit.id, hit)
    for hit in hits.values():  # a reply stands at least its share of what it answers, as in its own list
        if hit.reply_to is not None and hit.reply_to in scores:
            scores[hit.id] = max(scores[hit.id], hit.share * scores[hit.reply_to])
    # A list's replies fall below its `limit` fast where its scores are close together (a share of a
    # neighbour's cosine). Where the other list brought the same row as a reply, the relation still holds:
    # the row stands at least its share of that hit's fused score too, and says so.
    for reply in cut:
        hit = hits.get(reply.id)
        if hit is not None and hit.reply_to is not None and reply.reply_to in scores:
            floor = reply.share * scores[reply.reply_to]
            if floor > scores[reply.id]:
                scores[reply.id], hits[reply.id] = floor, replace(hit, reply_to=reply.reply_to, share=reply.share)
    ranked = sorted(scores, key=lambda i: (-scores[i], -i))
    return [(hits[i], scores[i]) for i in ranked][:limit]


def _linked(corpus: Corpus, text: str, filters: dict, ordered: list[tuple[Scored, float]],
            limit: int) -> tuple[list[tuple[Scored, float]], dict[int, str]]:
    """For a two-hop question (`memory.search.bridge`), the ranking with the rows its best hits' names find,
    and each such row's `why`."""
    if not ordered or not bridge.wanted(text):
        return ordered, {}
    top = [hit.id for hit, _ in ordered[:bridge.FROM_TOP]]
    found = {pk: (owner, value) for pk, owner, value in corpus.model.objects.filter(pk__in=top)
             .values_list("pk", "owner_id", corpus.text_columns[-1])}
    names = bridge.names([found[i][1] for i in top if i in found], text)
    if not names or top[0] not in found:
        return ordered, {}
    # A name means one person or place within one owner's world: the first hit's owner's rows only.
    same_owner = {**filters, "owner_id": found[top[0]][0]}
    hits = [h for h in lexical_hits(corpus, " ".join(names), same_owner, limit) if h.reply_to is None]
    placed = bridge.place(ordered, hits, limit)
    before = {hit.id for hit, _ in ordered}
    why = {}
    for hit, _ in placed:
        if hit.id not in before:
            named = [n for n in names if n.lower() in hit.snippet.lower()] or names
            why[hit.id] = f"linked by {', '.join(named)} to #{top[0]}"
    return placed, why


def _why(hit: Scored, in_span: bool, spans: list[Span], semantic: bool) -> str:
    if hit.reply_to is not None:
        return f"reply to #{hit.reply_to}"
    words = _marked(hit)
    if in_span:
        return spans[0].label + (f", matched: {', '.join(words)}" if words else "")
    if words:
        return "matched: " + ", ".join(words)
    return "similar meaning" if semantic else ""


def recall(corpus: Corpus, *, query: str, filters: dict, limit: int = 20, mode: str = "lexical",
           now: datetime | None = None, after: datetime | None = None, before: datetime | None = None) -> Recalled:
    """The rows for `query` in `mode`, best first, each with `signals` and `context`."""
    limit = max(1, min(int(limit), MAX_LIMIT))
    read = read_time(query or "", now or timezone.now())
    spans = list(read.spans)
    filters = _bounded(corpus, filters, after, before)
    span = _bounded(corpus, filters, min(s.start for s in spans), max(s.end for s in spans)) if spans else None
    ran, degraded, model = mode, None, None
    if mode != "lexical":
        model = embeddings.embedder()
        if model is None:
            ran, degraded = "lexical", "embeddings_not_configured"
    finish_semantic, cut = None, []  # the replies the lists' cuts left out, for the fusion
    if model is not None:
        model = _Prefetched(model, read.text or query)
        try:
            finish_semantic = _semantic(corpus, model, read.text or query, filters, span, limit, cut)
        except embeddings.EmbeddingError as exc:
            def finish_semantic(exc=exc):
                raise exc
    lexical_in, lexical_out = _lexical(corpus, read.text, filters, span, limit, cut) if ran != "semantic" else ([], [])
    semantic_in, semantic_out = [], []
    if ran != "lexical":
        try:
            semantic_in, semantic_out, degraded = finish_semantic()
        except embeddings.EmbeddingError as exc:
            logger.warning("recall ran lexically: %s", exc)
            semantic_in, semantic_out, degraded = [], [], "embeddings_failed"
        if degraded:  # incomplete or failing vectors: the lexical ranking alone, and the answer says so
            if ran == "semantic":
                lexical_in, lexical_out = _lexical(corpus, read.text, filters, span, limit)
            ran, semantic_in, semantic_out = "lexical", [], []
    # Lexical recall keeps its ranker's order (and shows its score); the word coverage is the fusion's.
    covering = ran == "hybrid"
    cut = cut if ran == "hybrid" else []  # only a fusion of both lists has another list to bring a cut reply
    ranked = (fuse(lexical_in, semantic_in, limit, covering=covering, cut=cut)
              + fuse(lexical_out, semantic_out, limit, covering=covering, cut=cut))
    seen, ordered = set(), []
    for hit, score in ranked:
        if hit.id not in seen:
            seen.add(hit.id)
            ordered.append((hit, score))
    ordered = ordered[:limit]
    ordered, linked = _linked(corpus, read.text or query, filters, ordered, limit)
    in_span = {h.id for h in lexical_in} | {h.id for h in semantic_in}
    lexical_rank = {h.id: n for n, h in enumerate(lexical_in + lexical_out, start=1) if h.reply_to is None}
    semantic_rank = {h.id: n for n, h in enumerate(semantic_in + semantic_out, start=1)}
    scores = {hit.id: score for hit, score in ordered}
    rows = rows_of(corpus, [hit for hit, _ in ordered])
    for row in rows:
        hit = row.hit
        row.context = "reply" if hit.reply_to is not None else None
        score = hit.score if ran == "lexical" else scores[hit.id]
        row.signals = {"lexical_rank": lexical_rank.get(hit.id), "semantic_rank": semantic_rank.get(hit.id),
                       "score": round(score, 4),
                       "why": linked.get(hit.id) or _why(hit, hit.id in in_span, spans, hit.id in semantic_rank)}
    return Recalled(rows, ran, degraded, spans)


def default_mode() -> str:
    """`hybrid` when an embedding backend is configured, else `lexical`."""
    return "lexical" if conf.embeddings.backend == "none" else "hybrid"
