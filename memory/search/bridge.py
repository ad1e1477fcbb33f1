"""Two-hop questions: a thing named by a second fact, found through the name the first fact gives.

"What profession does the sibling who takes her mum to appointments have?" matches "My brother Imran is
taking her to the appointments", but the answer, "Imran offered to invest and do the books. He's an
accountant.", shares no word and little meaning with the question: only the name links them. A question
that describes its subject by a relative clause (a noun, then who / that / which / whose) is such a
question; for it, the names the best hits give and the question lacks are searched too, and the best of
those rows are placed after the question's own best hits (`why`: "linked by Imran to #123").

Names are capitalised words of the best hits (proper nouns, whether or not they start a sentence: "Leah
is brilliant"), stop words and the question's own words left out; the lexical ranking of them weighs a
rare name above a capitalised common word. Tuned on `bench/recall_eval.py` (docs/recall.md).
"""

from __future__ import annotations

import re

from memory.search.rank import SCORED_CHARS, Scored
from memory.search.text import STOP_WORDS, stem, words

# A relative clause after a noun: "the person who", "the company that", never the question's first word.
RELATIVE = re.compile(r"\b(?!(?:what|who|which|when|where|how|why|that|this|and|or)\b)[^\W\d_]+\s+"
                      r"(?:who|that|which|whose)\b", re.IGNORECASE)
FROM_TOP = 2  # the best hits whose names are followed
MAX_NAMES = 3
KEEP = 3  # the question's own best hits that stay ahead of the linked rows
TAKE = 2  # linked rows placed after them


def wanted(query: str) -> bool:
    """Whether `query` names its subject by a relative clause (a second fact)."""
    first = query.split(maxsplit=1)[1:] or [""]
    return bool(RELATIVE.search(first[0]))


def names(texts: list[str], query: str) -> list[str]:
    """The capitalised words of `texts` that are not stop words nor words of `query`, first seen first; of a
    very long text, those of its beginning, as it is ranked (two hits of 512 KiB each took 173 ms)."""
    asked = {stem(w) for w in words(query)}
    found: dict[str, str] = {}
    for text in texts:
        for raw in re.findall(r"[^\W\d_]+", text[:SCORED_CHARS]):
            if not raw[:1].isupper() or len(raw) < 2 or raw.lower() == "i":
                continue
            for word in words(raw):
                if word not in STOP_WORDS and stem(word) not in asked and stem(word) not in found:
                    found[stem(word)] = raw
    return list(found.values())[:MAX_NAMES]


def place(ordered: list[tuple[Scored, float]], linked: list[Scored], limit: int) -> list[tuple[Scored, float]]:
    """The ranking with up to TAKE linked rows (not already in it) after its first KEEP."""
    seen = {hit.id for hit, _ in ordered}
    extra = [h for h in linked if h.id not in seen][:TAKE]
    if not extra:
        return ordered
    floor = ordered[min(KEEP, len(ordered)) - 1][1] if ordered else 0.0
    return (ordered[:KEEP] + [(h, floor) for h in extra] + ordered[KEEP:])[:limit]
