"""What a search query means: content words, their stems and weights, and quoted phrases.

A model asks recall in natural language ("when did she start the pottery class?"). Requiring every
word to match finds almost nothing for such questions, so a query is reduced to its content words:
stop words and question words are dropped, the rest are stemmed like the index stems them (Porter),
and names and numbers weigh more because they pin a question to the message that answers it. Text in
double quotes is also kept as a phrase (stop words included). Any string is a valid query. One made
only of stop words ("the who") needs all of its words, newest first; one without words finds nothing.
What a query costs is bounded whatever its length: MAX_TERMS words, MAX_PHRASES phrases of at most
MAX_PHRASE_WORDS words each.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

WORD_RE = re.compile(r"[^\W_]+")
ASCII_WORD_RE = re.compile(r"[a-z0-9]+")  # the same tokens, faster, once ASCII text is lower-cased
PHRASE_RE = re.compile(r'"([^"]+)"')
MAX_TERMS = 8
MAX_PHRASES = 4  # quoted phrases read, the first distinct ones: each is an index pass of its own
MAX_PHRASE_WORDS = 8  # a longer phrase is matched by its first eight words
NAME_WEIGHT = 1.6  # a capitalised word inside the question, or a number

STOP_WORDS = frozenset("""
a about above after again against ago all also am an and any are aren as at be because been before being below
between both but by can cannot could couldn d did didn do does doesn doing don down during each else ever few for
from further had hadn has hasn have haven having he her here hers herself him himself his how i if in into is isn
it its itself just ll m me might more most must mustn my myself no nor not now of off on once only or other ought
our ours ourselves out over own re s same shall shan she should shouldn so some such t than that the their theirs
them themselves then there these they this those through to too under until up upon us ve very was wasn we were
weren what when where whether which while who whom whose why will with won would wouldn y yet you your yours
yourself yourselves
anything something everything nothing anyone someone everyone thing things stuff really please thanks thank ok okay
yes yeah hey hi hello tell told say said says mention mentioned remember remind recall know knew ask asked talk
talked talking discuss discussed let get got kind sort like much many lot lots way
""".split())


def fold(text: str) -> str:
    """Lower-case and strip diacritics, as the index's `unicode61 remove_diacritics 2` does."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def words(text: str) -> list[str]:
    """The index's tokens of `text`: runs of letters and digits, folded."""
    if text.isascii():
        return ASCII_WORD_RE.findall(text.lower())
    return WORD_RE.findall(fold(text))


def word_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, folded word) for each token of `text`, positions in the original string."""
    if text.isascii():
        return [(m.start(), m.end(), m.group()) for m in ASCII_WORD_RE.finditer(text.lower())]
    return [(m.start(), m.end(), fold(m.group())) for m in WORD_RE.finditer(text)]


def stems(text: str) -> list[str]:
    cache = _stem_cache
    return [cache.get(w) or stem(w) for w in words(text)]


# --- Porter stemmer (the original 1980 algorithm, as FTS5's `porter` tokenizer applies it) -------------


def _cons(w: str, i: int) -> bool:
    ch = w[i]
    if ch in "aeiou":
        return False
    if ch == "y":
        return i == 0 or not _cons(w, i - 1)
    return True


def _measure(stem: str) -> int:
    forms = "".join("c" if _cons(stem, i) else "v" for i in range(len(stem)))
    return len(re.findall("vc", re.sub(r"(.)\1+", r"\1", forms)))


def _has_vowel(stem: str) -> bool:
    return any(not _cons(stem, i) for i in range(len(stem)))


def _double_cons(w: str) -> bool:
    return len(w) >= 2 and w[-1] == w[-2] and _cons(w, len(w) - 1)


def _cvc(w: str) -> bool:
    n = len(w)
    return (n >= 3 and _cons(w, n - 1) and not _cons(w, n - 2) and _cons(w, n - 3)
            and w[-1] not in "wxy")


STEP2 = [("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
         ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"), ("ization", "ize"),
         ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"),
         ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"), ("logi", "log")]
STEP3 = [("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""),
         ("ness", "")]
STEP4 = ["al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou", "ism",
         "ate", "iti", "ous", "ive", "ize"]


def _replace(w: str, rules, min_measure: int) -> str:
    for suffix, replacement in rules:
        if w.endswith(suffix):
            stem = w[: -len(suffix)]
            return stem + replacement if _measure(stem) > min_measure else w
    return w


def _step1(w: str) -> str:
    if w.endswith("sses") or w.endswith("ies"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if w.endswith("eed"):
        return w[:-1] if _measure(w[:-3]) > 0 else w
    for suffix in ("ed", "ing"):
        if w.endswith(suffix) and _has_vowel(w[: -len(suffix)]):
            w = w[: -len(suffix)]
            if w.endswith(("at", "bl", "iz")):
                return w + "e"
            if _double_cons(w) and w[-1] not in "lsz":
                return w[:-1]
            if _measure(w) == 1 and _cvc(w):
                return w + "e"
            return w
    return w


def _step4(w: str) -> str:
    for suffix in sorted(STEP4, key=len, reverse=True):
        if w.endswith(suffix):
            stem = w[: -len(suffix)]
            if suffix == "ion" and not stem.endswith(("s", "t")):
                return w
            return stem if _measure(stem) > 1 else w
    return w


def _step5(w: str) -> str:
    if w.endswith("e"):
        stem = w[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            w = stem
    if w.endswith("ll") and _measure(w) > 1:
        w = w[:-1]
    return w


_stem_cache: dict[str, str] = {}


def stem(word: str) -> str:
    """Porter stem of a folded word; words outside a-z or shorter than 3 letters pass through."""
    cached = _stem_cache.get(word)
    if cached is None:
        if len(_stem_cache) > 200_000:
            _stem_cache.clear()
        cached = _stem_cache[word] = _porter(word)
    return cached


def stem_prefix(stem_: str) -> str:
    """A prefix that every word with this Porter stem starts with: the stem less its last letter, at most 4.

    The algorithm only removes or rewrites suffixes, and a rewrite (`y` → `i`, `biliti` → `ble`,
    `ational` → `ate`) keeps all but the last letter it leaves (checked over 1.2 million distinct words;
    `tests/search/test_query.py` checks it again). Ranking stems only the words that start like this.
    """
    return stem_[:max(min(len(stem_) - 1, 4), 1)]


def _porter(word: str) -> str:
    if len(word) < 3 or len(word) > 64 or not word.isascii() or not word.isalpha():
        return word
    w = _step1(word)
    if w.endswith("y") and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    w = _replace(w, STEP2, 0)
    w = _replace(w, STEP3, 0)
    return _step5(_step4(w))


# --- queries -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    word: str  # the folded word as written (sent to the index, which stems it itself)
    stem: str
    weight: float = 1.0


@dataclass
class Query:
    terms: list[Term] = field(default_factory=list)
    phrases: list[tuple[str, ...]] = field(default_factory=list)  # folded words of each quoted phrase
    require_all: bool = False  # a query of stop words only: every word must occur

    def __bool__(self) -> bool:
        return bool(self.terms or self.phrases)

    @property
    def phrase_stems(self) -> list[tuple[str, ...]]:
        return [tuple(stem(w) for w in p) for p in self.phrases]


def _is_name_or_number(raw: str, sentence_start: bool) -> bool:
    if any(ch.isdigit() for ch in raw):
        return True
    return raw[:1].isupper() and (not sentence_start or raw.isupper() and len(raw) > 1)


def analyse(text: str) -> Query:
    """Content terms (deduplicated by stem, at most MAX_TERMS) and quoted phrases of `text` (at most
    MAX_PHRASES, each of at most MAX_PHRASE_WORDS words), so that no query costs more than these: a query of
    a thousand quoted phrases had run three thousand statements."""
    query = Query()
    for inner in PHRASE_RE.findall(text):
        phrase = tuple(words(inner)[:MAX_PHRASE_WORDS])
        if len(phrase) > 1 and phrase not in query.phrases:
            query.phrases.append(phrase)
            if len(query.phrases) == MAX_PHRASES:
                break
        # A one-word "phrase" is just a word, counted below.
    candidates: list[Term] = []
    sentence_start = True
    for match in re.finditer(r"[^\W_]+|[.!?]", text):
        raw = match.group()
        if raw in ".!?":
            sentence_start = True
            continue
        for word in words(raw):
            weight = NAME_WEIGHT if _is_name_or_number(raw, sentence_start) else 1.0
            candidates.append(Term(word, stem(word), weight))
        sentence_start = False
    content = [t for t in candidates if t.word not in STOP_WORDS]
    if not content and not query.phrases:
        content, query.require_all = candidates, bool(candidates)
    seen: dict[str, Term] = {}
    for term in content:
        if term.stem not in seen or term.weight > seen[term.stem].weight:
            seen[term.stem] = term
    query.terms = list(seen.values())[:MAX_TERMS]
    return query


def fts_string(words_: tuple[str, ...] | list[str] | str) -> str:
    """An FTS5 string literal: the words in double quotes (a phrase when more than one)."""
    if isinstance(words_, str):
        words_ = [words_]
    return '"' + " ".join(words_).replace('"', '""') + '"'
