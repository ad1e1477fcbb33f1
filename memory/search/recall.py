"""Recall as `memory_recall` runs it: lexical, semantic or hybrid, aware of time, every result explained.

`recall(corpus, query=…, filters=…, limit=…, mode=…)` reads the time words of the query first
(`memory.search.when`): they narrow the results to their span (those found inside it come first, marked
`time: …`) and leave the lexical query, so a month's name does not match unrelated messages. `after` and
`before` are hard bounds. The lexical ranking is `memory.search.lexical_hits` (the replies after the best
hits included, marked `context: reply`); the semantic one is the nearest vectors (`memory.search.vectors`);
`hybrid` fuses the two keeping the lexical list's best hits in place. Each row gets `signals`:
`{"lexical_rank", "semantic_rank", "score", "why"}` and `context` (`"reply"` or None), and the answer says
which mode ran and, when a weaker one ran instead, why (`degraded`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from memory.search import MAX_LIMIT, Corpus, lexical_hits, rows_of
from memory.search.rank import MARK_END, MARK_START, Scored
from memory.search.text import analyse
from memory.search.when import Span, read_time

MODES = ("hybrid", "lexical", "semantic")
MARKED = re.compile(re.escape(MARK_START) + r"(.+?)" + re.escape(MARK_END))
SPAN_LISTING = 50  # a question that is only a time ("what happened yesterday?") lists its span's rows


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
    """The rows in the filters' span, oldest first: for a query with no match inside its time span."""
    orm = {(f"{k}__in" if isinstance(v, list | tuple | set) else k): v for k, v in filters.items() if v is not None}
    rows = corpus.model.objects.filter(**orm).order_by(corpus.time_column, "pk").values_list("pk", flat=True)
    return [Scored(pk, 0.0, "") for pk in rows[:min(limit, SPAN_LISTING)]]


def _lexical(corpus: Corpus, text: str, filters: dict, spans: list[Span], limit: int) -> tuple[list[Scored], set]:
    """The lexical ranking, rows inside the query's time span first; and the ids found inside it."""
    if not spans:
        return lexical_hits(corpus, text, filters, limit), set()
    span = _bounded(corpus, filters, min(s.start for s in spans), max(s.end for s in spans))
    has_words = bool(analyse(text))
    # No match inside the span (or no words besides the time): what was said then, in order.
    inside = (lexical_hits(corpus, text, span, limit) if has_words else []) or _listing(corpus, span, limit)
    seen = {h.id for h in inside}
    outside = [h for h in lexical_hits(corpus, text, filters, limit) if h.id not in seen] if has_words else []
    return (inside + outside)[:limit], seen


def _why(hit: Scored, in_span: bool, spans: list[Span], semantic: bool) -> str:
    if hit.reply_to is not None:
        return f"reply to #{hit.reply_to}"
    words = list(dict.fromkeys(m.lower() for m in MARKED.findall(hit.snippet)))
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
    ran, degraded = mode, None
    if mode != "lexical":
        ran, degraded = "lexical", "embeddings_unavailable"
    hits, in_span = _lexical(corpus, read.text, filters, spans, limit)
    lexical_rank = {h.id: n for n, h in enumerate(hits, start=1) if h.reply_to is None}
    rows = rows_of(corpus, hits)
    for row in rows:
        hit = row.hit
        row.context = "reply" if hit.reply_to is not None else None
        row.signals = {"lexical_rank": lexical_rank.get(hit.id), "semantic_rank": None,
                       "score": round(hit.score, 4), "why": _why(hit, hit.id in in_span, spans, False)}
    return Recalled(rows, ran, degraded, spans)


def default_mode() -> str:
    """The mode a recall without `mode` runs: lexical until vectors are stored (then hybrid)."""
    return "lexical"
