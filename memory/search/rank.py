"""Ranking of a bounded candidate set: BM25 over the query's content words, phrases, recency; snippets.

The score of a document d for content terms t with weights w_t (names and numbers weigh more):

    relevance(d) = Σ_t w_t · idf(t) · tf(t,d)·(k1+1) / (tf(t,d) + k1·(1 − b + b·|d|/avgdl))
                   + Σ_phrases idf(phrase words) when the phrase occurs in d
    score(d)     = relevance(d) · (1 + RECENCY_WEIGHT · ½^(age(d) / RECENCY_HALF_LIFE))

Recency is a bounded tie-breaker: it can lift a document by at most 25 %, which reorders documents of
similar relevance (the newer of two statements of the same fact comes first) but never lets a recent
message that shares one common word outrank an old one that matches the question's rare words.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from datetime import datetime

from memory.search.text import Query, stem, stem_prefix, word_spans, words

K1, B = 1.2, 0.75
RECENCY_WEIGHT = 0.25
RECENCY_HALF_LIFE_DAYS = 30.0
SNIPPET_WORDS = 30
SCORED_CHARS = 20_000  # a very long message is scored on its beginning (the index still found it whole)
# What a query reads of a row it ranks or shows: as far as it is scored, and one character more, which tells the
# snippet the text was cut (a message of 512 KiB read whole for each of 80 candidates held 38 MiB).
READ_CHARS = SCORED_CHARS + 1
FLOOR = 0.01  # every candidate matched in the index; one the scorer cannot place still ranks, last
MARK_START, MARK_END = "«", "»"


@dataclass
class Scored:
    id: int
    score: float
    snippet: str
    reply_to: int | None = None  # a reply added after this hit (context), not a match of its own
    share: float = 1.0  # a reply's share of that hit's score: less for the message after the next


def idf(df: float, total: float) -> float:
    total = max(total, df, 1.0)
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


def recency_factor(when: datetime | None, now: datetime) -> float:
    if when is None:
        return 1.0
    age_days = max((now - when).total_seconds() / 86400.0, 0.0)
    return 1.0 + RECENCY_WEIGHT * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)


def _contains(sequence: list[str], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return any(tuple(sequence[i:i + n]) == phrase for i in range(len(sequence) - n + 1))


def rank(query: Query, docs: list[tuple[int, str, datetime | None]], *, idfs: dict[str, float],
         now: datetime, limit: int) -> list[Scored]:
    """The best `limit` of `docs` (id, text, time) for `query`, best first; ties go to the newer id."""
    weights = {t.stem: t.weight * idfs.get(t.stem, 1.0) for t in query.terms}
    phrases = [(p, sum(idfs.get(s, 1.0) for s in p)) for p in query.phrase_stems]
    wanted = set(weights) | {s for p, _ in phrases for s in p}
    # Only words that start like a query stem can have it (`stem_prefix`): the others are not stemmed.
    prefixes = tuple({stem_prefix(s) for s in wanted})
    tokenised = []
    for doc_id, text, when in docs:
        tokens = words(text[:SCORED_CHARS])
        marks = [stem(w) if w.startswith(prefixes) else "" for w in tokens] if phrases else \
            [stem(w) for w in tokens if w.startswith(prefixes)]
        tokenised.append((doc_id, text, when, len(tokens), marks))
    avgdl = sum(t[3] for t in tokenised) / max(len(tokenised), 1) or 1.0
    scored = []
    for doc_id, text, when, length, marks in tokenised:
        relevance = _bm25(marks, length, weights, avgdl)
        relevance += sum(bonus for phrase, bonus in phrases if _contains(marks, phrase))
        relevance = max(relevance, FLOOR)
        scored.append((relevance * recency_factor(when, now), doc_id, text))
    scored.sort(key=lambda s: (-s[0], -s[1]))
    return [Scored(doc_id, score, snippet(text, wanted, weights)) for score, doc_id, text in scored[:limit]]


def _bm25(marks: list[str], length: int, weights: dict[str, float], avgdl: float) -> float:
    counts: dict[str, int] = {}
    for s in marks:
        if s in weights:
            counts[s] = counts.get(s, 0) + 1
    norm = K1 * (1 - B + B * length / avgdl)
    return sum(weights[s] * tf * (K1 + 1) / (tf + norm) for s, tf in counts.items())


def snippet(text: str, matched: set[str], weights: dict[str, float]) -> str:
    """The window of SNIPPET_WORDS words with the most query weight, matched words in «…»."""
    spans = word_spans(text[:SCORED_CHARS])
    prefixes = tuple({stem_prefix(s) for s in matched})
    doc_stems = [stem(w) if w.startswith(prefixes) else "" for _, _, w in spans]
    if not spans:
        return text[:200]
    hits = [i for i, s in enumerate(doc_stems) if s in matched][:500]
    best_start, best = 0, -1.0
    last_start = max(len(spans) - SNIPPET_WORDS, 0)  # a window is full-length: a short text is shown whole
    for hit in hits:
        start = min(max(hit - 5, 0), last_start)
        inside = hits[bisect.bisect_left(hits, start):bisect.bisect_left(hits, start + SNIPPET_WORDS)]
        value = sum(weights.get(s, 1.0) for s in {doc_stems[i] for i in inside})
        if value > best:
            best_start, best = start, value
    end = min(best_start + SNIPPET_WORDS, len(spans))
    pieces, cursor = [], spans[best_start][0] if best_start else 0
    for i in range(best_start, end):
        s, e, _ = spans[i]
        pieces.append(text[cursor:s])
        word = text[s:e]
        pieces.append(f"{MARK_START}{word}{MARK_END}" if doc_stems[i] in matched else word)
        cursor = e
    whole = end == len(spans) and len(text) <= SCORED_CHARS
    tail = text[cursor:] if whole else ""
    return (("…" if best_start else "") + "".join(pieces) + tail + ("" if whole else "…")).strip()
