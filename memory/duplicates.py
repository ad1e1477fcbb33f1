"""Each fact once: whether a new value says what a live row of the same category already says.

Two signals, the second only when an embedding model is configured:

- **the words**: a value's content words, lower-cased, lightly stemmed, a few common synonyms folded
  ("enjoys", "loves" → "like"; "resides" → "live"), filler dropped ("the user", "really", "is", "a").
  Equal word sets are the same fact; a set inside the other is the same fact with a detail added or left
  out ("works at Google" / "works at Google as an engineer").
- **the meaning**: the cosine of the two values' vectors, counted only when the values also share a good
  part of their words (`MIN_SHARED`). Alike sentences about different things ("has a sister in Berlin" /
  "has a brother in Berlin") score high on meaning alone; sharing words as well is what a rewording does.

A negation on one side only ("likes" / "dislikes", "eats meat" / "does not eat meat") is never a
duplicate: it is a contradiction, which the model resolves with `replace` (the latest statement wins).
The rates on `tests/memory/reviewer/duplicate_pairs.py` are in docs/reviewer.md.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

SIMILAR = 0.82  # cosine, for the default local model (all-MiniLM-L6-v2)
MIN_SHARED = 0.4  # Jaccard of the content words the meaning signal needs as well
MAX_EMBEDDED_ROWS = 20  # rows embedded per review for the meaning signal: those sharing the most words

FILLER = frozenset("""
a an the user user's users they he she i my their his her is are am was be been being has have had having
do does did to of in on at for with by from as and or so very really quite also now currently always just
still recently usually generally often get gets that this who which when it its about
""".split())
NEGATIONS = frozenset({"not", "no", "never", "dislik", "without"})
PHRASES = [  # folded before the words are split, so a negation stays one word
    (r"\b(?:does|do|did)\s*(?:not|n't)\s+(?:like|enjoy|love)\b", "dislike"),
    (r"\bn't\b", " not"),
    (r"\bis into\b|\binterested in\b|\bfond of\b|\bkeen on\b", "like"),
    (r"\bname is\b|\bnamed\b|\bcalled\b", "named"),
    (r"\bbased in\b", "lives in"),
]
SYNONYMS = {  # by stem
    "lov": "lik", "enjoy": "lik", "prefer": "lik", "ador": "lik",
    "resid": "liv", "own": "hav", "employ": "work", "learn": "stud", "plan": "want", "hop": "want",
    "study": "stud", "kid": "child", "children": "child",
    "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
}
WORD = re.compile(r"[a-z0-9]+")
SUFFIXES = ("ies", "ing", "ed", "es", "ic", "s", "y")


def _stem(word: str) -> str:
    """One crude suffix off, then a final e (both sides of a comparison go through the same rule)."""
    for suffix in SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


@functools.lru_cache(maxsize=8192)
def words(value: str) -> frozenset[str]:
    """The content words of a value, as they are compared (cached: a review compares each new value with
    the same few hundred live rows as the review before)."""
    text = unicodedata.normalize("NFKC", value).lower().replace("\u2019", "'")
    for pattern, replacement in PHRASES:
        text = re.sub(pattern, replacement, text)
    out = set()
    for word in WORD.findall(text.replace("'s", "")):
        if word in FILLER:
            continue
        stemmed = _stem(word)
        out.add(SYNONYMS.get(stemmed, stemmed))
    return frozenset(out)


def normalised(value: str) -> str:
    """A value's words in a stable order: equal for values that say the same with other filler."""
    return " ".join(sorted(words(value)))


@dataclass(frozen=True)
class Match:
    """A live row a new value duplicates, and whether the value adds a detail the row lacks."""

    memory_id: int
    why: str  # "same words", "same words, one more detail", "similar meaning (0.87)"
    adds_detail: bool


def shared(a: frozenset, b: frozenset) -> float:
    """The share of their content words two values have in common (Jaccard)."""
    return len(a & b) / len(a | b) if a or b else 0.0


def _negated(a: frozenset, b: frozenset) -> bool:
    return bool((a & NEGATIONS) ^ (b & NEGATIONS))


def compare(row_words: frozenset, new_words: frozenset, cosine: float | None) -> tuple[str, bool] | None:
    """(why, adds_detail) when the new value duplicates the row, else None."""
    if not row_words or not new_words or _negated(row_words, new_words):
        return None
    if row_words == new_words:
        return "same words", False
    if new_words <= row_words:
        return "the row says this and more", False
    if row_words <= new_words:
        return "same words, one more detail", True
    if cosine is not None and cosine >= SIMILAR and shared(row_words, new_words) >= MIN_SHARED:
        return f"similar meaning ({cosine:.2f})", False
    return None


def find_duplicate(value: str, rows: list[tuple[int, str]], vectors: dict | None = None) -> Match | None:
    """The first of `rows` ((id, value), newest first) that `value` duplicates.

    `vectors` maps a text to its unit vector (`vectors_for`), or is None without an embedding model.
    """
    new_words = words(value)
    new_vector = vectors.get(value) if vectors else None
    for memory_id, row_value in rows:
        cosine = None
        if new_vector is not None and vectors.get(row_value) is not None:
            cosine = float(np.dot(new_vector, vectors[row_value]))
        found = compare(words(row_value), new_words, cosine)
        if found:
            return Match(memory_id, *found)
    return None


def meaning_candidates(new_values: list[str], row_values: list[str], limit: int = MAX_EMBEDDED_ROWS) -> list[str]:
    """The row values the meaning signal could match with one of `new_values`: those sharing enough words
    with one, the most shared first, at most `limit`. Only these (and the new values) need a vector."""
    new_words = [words(v) for v in new_values]
    scored = []
    for order, value in enumerate(row_values):
        row_words = words(value)
        best = max((shared(row_words, w) for w in new_words), default=0.0)
        if best >= MIN_SHARED:
            scored.append((-best, order, value))
    return [value for _, _, value in sorted(scored)[:limit]]


def texts_to_embed(new_values: list[str], row_values: list[str]) -> list[str]:
    """What the meaning signal needs vectors of: the new values and the rows near enough to one of them
    (`meaning_candidates`); nothing when no row, nor another new value, is (the local model takes about
    5 ms a value on one core, so a review embeds a handful at most)."""
    near = meaning_candidates(new_values, row_values)
    near_each_other = any(meaning_candidates([v], new_values[:i] + new_values[i + 1:])
                          for i, v in enumerate(new_values))
    return new_values + near if near or near_each_other else []


def vectors_for(texts, embedder) -> dict:
    """Each distinct text's vector by `embedder` (one call; make it with no transaction open)."""
    distinct = sorted({t for t in texts if t})
    if embedder is None or not distinct:
        return {}
    return dict(zip(distinct, embedder.embed_documents(distinct), strict=True))
