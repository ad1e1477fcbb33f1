"""What a query means: content words, stems like the index's, weights for names and numbers, phrases; the plan."""

import pytest

from memory.search import plan
from memory.search.text import MAX_PHRASES, analyse, fts_string, stem, words


@pytest.mark.parametrize("word, expected", [
    ("caresses", "caress"), ("ponies", "poni"), ("cats", "cat"), ("agreed", "agre"), ("feed", "feed"),
    ("plastered", "plaster"), ("motoring", "motor"), ("sing", "sing"), ("conflated", "conflat"),
    ("hopping", "hop"), ("falling", "fall"), ("filing", "file"), ("happy", "happi"), ("sky", "sky"),
    ("relational", "relat"), ("conditional", "condit"), ("generalization", "gener"), ("running", "run"),
    ("marathons", "marathon"), ("started", "start"), ("classes", "class"), ("pottery", "potteri"),
    ("triplicate", "triplic"), ("electrical", "electr"), ("adjustable", "adjust"), ("controlling", "control"),
    ("roll", "roll"), ("2019", "2019"), ("é", "é"), ("ab", "ab"),
])
def test_stems_follow_the_porter_algorithm(word, expected):
    assert stem(word) == expected


def test_words_are_folded_like_the_index_folds_them():
    assert words("Naïve CAFÉ, node.js & C++ — 🙂 x_y") == ["naive", "cafe", "node", "js", "c", "x", "y"]


def test_a_question_keeps_its_content_words():
    query = analyse("When did she start the pottery class?")
    assert [t.word for t in query.terms] == ["start", "pottery", "class"]
    assert not query.require_all and query.phrases == []


def test_names_and_numbers_weigh_more_except_a_capital_that_starts_a_sentence():
    query = analyse("Did Maya move in 2019? Pottery was fun.")
    weights = {t.word: t.weight for t in query.terms}
    assert weights["maya"] > 1 and weights["2019"] > 1
    assert weights["move"] == 1 and weights["pottery"] == 1 and weights["fun"] == 1


def test_words_with_the_same_stem_count_once():
    assert [t.stem for t in analyse("class classes classed").terms] == ["class"]


def test_quoted_text_is_a_phrase_and_its_words_are_terms():
    query = analyse('did she say "green tea" or "x"?')
    assert query.phrases == [("green", "tea")]
    assert [t.word for t in query.terms] == ["green", "tea", "x"]


def test_a_query_reads_at_most_four_phrases_of_at_most_eight_words():
    query = analyse('"a b" "a b" "c d" "e f" "g h" "i j" "one two three four five six seven eight nine ten"')
    assert query.phrases == [("a", "b"), ("c", "d"), ("e", "f"), ("g", "h")]
    assert analyse('"one two three four five six seven eight nine ten"').phrases == [
        ("one", "two", "three", "four", "five", "six", "seven", "eight")]
    assert len(analyse(" ".join(f'"word{i} other{i}"' for i in range(1000))).phrases) == MAX_PHRASES


def test_stop_words_alone_need_every_word():
    query = analyse("The Who?")
    assert query.require_all and [t.word for t in query.terms] == ["the", "who"]


def test_text_without_words_is_empty():
    for text in ("", "   ", "?!", "🙂", '""', "--"):
        assert not analyse(text)


def test_fts_strings_double_embedded_quotes():
    assert fts_string('a"b') == '"a""b"'
    assert fts_string(("green", "tea")) == '"green tea"'


def test_document_frequency_is_counted_when_few_and_estimated_when_many():
    assert plan.estimate_df([90, 50, 10], probe=5, max_id=100) == 3
    # The newest 5 matches reach back over the last 10 of 1000 rows: about half the table.
    assert plan.estimate_df([1000, 998, 996, 994, 991], probe=5, max_id=1000) == 500


def test_the_plan_starts_with_phrases_and_the_rarest_terms_and_skips_very_common_ones():
    query = analyse('"pottery class" start Clayworks')
    df = {"potteri": 50, "class": 800, "start": 90_000, "claywork": 3}
    passes = plan.passes(query, df, total=1_000_000)
    assert passes[0].words == (("pottery", "class"),)
    assert passes[1].words == (("clayworks",), ("pottery",), ("class",), ("start",))
    singles = [p.words for p in passes if len(p.words) == 1 and len(p.words[0]) == 1]
    assert singles == [(("clayworks",),), (("pottery",),), (("class",),)]


def test_collect_stops_at_the_budget():
    calls = []

    def run(step):
        calls.append(step)
        return list(range(len(calls) * 100, len(calls) * 100 + step.limit))

    steps = [plan.Pass((("a",),), 150)] * 5
    ids, cut = plan.collect(steps, run, budget=250)
    assert len(calls) == 2 and len(ids) == 250 and cut


def test_collect_hands_over_together_the_passes_that_run_whatever_the_earlier_ones_find():
    batches = []

    def run(steps):
        batches.append([s.words[0][0] for s in steps])
        # "a" and "b" find the same 100 rows; every other pass finds 100 rows of its own.
        return [[(0 if s.words[0][0] in "ab" else ord(s.words[0][0]) * 1000) + i for i in range(100)] for s in steps]

    steps = [plan.Pass(((word,),), 100) for word in "abcde"]
    ids, cut = plan.collect(steps, run, budget=250, batched=True)
    # a, b and c run whatever a and b find (200 ids at most); they find 200, so d alone fills the budget.
    assert batches == [["a", "b", "c"], ["d"]] and len(ids) == 300 and cut
    one_by_one, _ = plan.collect(steps, lambda step: run([step])[0], budget=250)
    assert one_by_one == ids


def test_conjunctions_read_a_bounded_share_of_their_rarest_list():
    total = 1_000_000
    # A rare word drives the conjunction: read whole, however long the other lists are.
    assert plan.passes(analyse("zanzibar the pottery"), {"zanzibar": 40, "potteri": 60_000}, total)[0].after_id == 0
    # Two mid-frequency words: the newest rows holding about SCAN_BUDGET postings of the rarer.
    [both, *_] = plan.passes(analyse("pottery class"), {"potteri": 40_000, "class": 50_000}, total)
    assert both.after_id == total - total * plan.SCAN_BUDGET // 40_000
    # Within a scope each posting of the rarest list is a step in the two others: SEEK_BUDGET steps.
    [both, *_] = plan.passes(analyse("pottery class"), {"potteri": 40_000, "class": 50_000}, total, scope_df=2_000)
    assert both.after_id == int(total - total * (plan.SEEK_BUDGET / 2) / 2_000)
    # A phrase of common words in a large owner's rows: the same.
    query = analyse('"yourself okay"')
    sizes = {"yourself": 880_000, "okai": 19_000}
    assert plan.passes(query, sizes, total, scope_df=9_000)[0].after_id == int(total - total * 500 / 9_000)
    # A small owner, or a rare word in a large one, is read whole.
    assert plan.passes(query, sizes, total, scope_df=400)[0].after_id == 0
    assert plan.passes(analyse('"pottery class"'), {"potteri": 300, "class": 50_000}, total,
                       scope_df=9_000)[0].after_id == 0


def test_every_word_starts_with_the_prefix_of_its_stem():
    """Ranking stems only the words that start like a query stem (`stem_prefix`), so this must hold for
    every word: here the words of the standard library's sources and some the algorithm rewrites."""
    from pathlib import Path

    from memory.search.text import stem_prefix

    tricky = ["sensibility", "possibly", "say", "happy", "relational", "hopping", "conflated", "valency",
              "digitizer", "vietnamization", "predication", "operator", "feudalism", "generously",
              "formality", "sensitivity", "electrical", "hopefulness", "agreed", "filing", "sky", "ties"]
    vocabulary = set(tricky)
    for path in sorted(Path(pytest.__file__).parent.parent.glob("*/*.py"))[:400]:
        vocabulary.update(words(path.read_text(errors="ignore")))
    assert len(vocabulary) > 5_000
    wrong = [w for w in vocabulary if not w.startswith(stem_prefix(stem(w)))]
    assert wrong == []


def test_a_short_text_is_its_own_snippet():
    from memory.search.rank import snippet

    text = "We signed up for the Thursday pottery class at Clayworks; the wheel is hard"
    assert snippet(text, {"potteri", "class"}, {}) == ("We signed up for the Thursday «pottery» «class» at "
                                                         "Clayworks; the wheel is hard")
    long = " ".join(["filler"] * 40 + ["pottery"] + ["filler"] * 40)
    shown = snippet(long, {"potteri"}, {})
    assert shown.startswith("…") and shown.endswith("…") and "«pottery»" in shown
    assert len(shown.split()) == 30
