"""Each fact once: a replace that changes nothing is skipped as `unchanged` (no event, no revision); an
add that says what a live row of the same owner and category says is skipped as a `duplicate`, or replaces
the row when it adds a detail; measured on the pairs of duplicate_pairs.py."""

import pytest

from memory import duplicates
from memory.embeddings.local import LocalEmbedder
from memory.models import Memory, MemoryEvent, ReviewOperation
from resources.models import Resource
from tests.memory.reviewer.conftest import review, say
from tests.memory.reviewer.duplicate_pairs import PAIRS
from tests.memory_factories import fact
from tests.personas import ops

pytestmark = pytest.mark.django_db

# The floors the detector must keep on the pairs (the measured rates are in docs/reviewer.md).
CAUGHT_FLOOR, MERGED_CEILING = 0.95, 0.02
WORDS_ONLY_CAUGHT_FLOOR = 0.85


def rates(vectors) -> tuple[float, float]:
    duplicates_total = sum(1 for p in PAIRS if p[3])
    caught = sum(1 for _, row, new, dup in PAIRS if dup and duplicates.find_duplicate(new, [(1, row)], vectors))
    merged = sum(1 for _, row, new, dup in PAIRS if not dup and duplicates.find_duplicate(new, [(1, row)], vectors))
    return caught / duplicates_total, merged / (len(PAIRS) - duplicates_total)


def test_the_pairs_are_enough_and_of_both_kinds():
    assert len(PAIRS) >= 100
    assert 40 <= sum(1 for p in PAIRS if p[3]) <= len(PAIRS) - 40


def test_duplicates_are_caught_and_distinct_facts_kept_with_the_default_model():
    vectors = duplicates.vectors_for([text for p in PAIRS for text in p[1:3]], LocalEmbedder())
    caught, merged = rates(vectors)
    print(f"duplicate pairs, words and the local model: caught {caught:.1%}, distinct merged {merged:.1%}")
    assert caught >= CAUGHT_FLOOR and merged <= MERGED_CEILING, (caught, merged)


def test_duplicates_are_caught_and_distinct_facts_kept_by_their_words_alone():
    caught, merged = rates(None)
    print(f"duplicate pairs, words only: caught {caught:.1%}, distinct merged {merged:.1%}")
    assert caught >= WORDS_ONLY_CAUGHT_FLOOR and merged <= MERGED_CEILING, (caught, merged)


def test_a_negation_is_never_a_duplicate():
    assert duplicates.find_duplicate("does not eat meat", [(1, "eats meat")]) is None
    assert duplicates.find_duplicate("dislikes jazz", [(1, "likes jazz")]) is None


def test_a_replace_that_changes_nothing_is_skipped_as_unchanged(model):
    city = fact("home_city", "lives in Lisbon", "identity")
    events = MemoryEvent.objects.count()
    say("still in Lisbon, yes")
    model.push(ops({"op": "replace", "id": city.id, "value": "lives in Lisbon"}))
    result = review()
    assert (result["ops_replaced"], result["ops_skipped"]) == (0, 1)
    operation = ReviewOperation.objects.get()
    assert (operation.status, operation.code, operation.memory_id) == ("skipped", "unchanged", city.id)
    assert MemoryEvent.objects.count() == events
    assert not Resource.objects.filter(resource_type="user_md").exists()  # nothing changed: no revision


def test_an_add_that_repeats_a_row_in_other_words_is_skipped_as_a_duplicate(model):
    job = fact("job", "works as a marine biologist", "identity")
    say("as I said, I'm a marine biologist")
    model.push(ops({"op": "add", "category": "identity", "key": "occupation",
                    "value": "The user is a marine biologist."}))
    result = review()
    assert (result["ops_added"], result["ops_skipped"]) == (0, 1)
    operation = ReviewOperation.objects.get()
    assert (operation.code, operation.memory_id) == ("duplicate", job.id)
    assert f"memory row {job.id} already says this" in operation.reason
    assert list(Memory.objects.values_list("key", flat=True)) == ["job"]


def test_an_add_that_refines_a_row_replaces_it(model):
    job = fact("job", "works at Google", "identity")
    say("I'm a software engineer at Google")
    model.push(ops({"op": "add", "category": "identity", "key": "role",
                    "value": "works at Google as a software engineer"}))
    result = review()
    assert (result["ops_added"], result["ops_replaced"]) == (0, 1)
    job.refresh_from_db()
    assert job.value == "works at Google as a software engineer"
    assert Memory.objects.count() == 1
    operation = ReviewOperation.objects.get()
    assert (operation.status, operation.action, operation.before_value) == ("applied", "replace", "works at Google")
    assert [n["code"] for n in operation.notes] == ["near_duplicate"]


def test_a_duplicate_in_another_category_or_of_another_owner_is_a_new_row(model):
    fact("job", "works as a marine biologist", "identity", owner="bo")
    fact("topic", "marine biology", "interest")
    say("I'm a marine biologist")
    model.push(ops({"op": "add", "category": "identity", "key": "job", "value": "works as a marine biologist"}))
    assert review()["ops_added"] == 1


def test_two_adds_of_one_fact_in_one_answer_make_one_row(model):
    say("I love jazz. Jazz is my favourite music!")
    model.push(ops({"op": "add", "category": "interest", "key": "music", "value": "loves jazz"},
                   {"op": "add", "category": "interest", "key": "jazz", "value": "loves jazz music"}))
    result = review()
    assert (result["ops_added"], result["ops_replaced"]) == (1, 1)
    assert list(Memory.objects.values_list("value", flat=True)) == ["loves jazz music"]


def test_a_rewording_only_the_embedding_model_sees_is_caught_when_one_is_configured(model):
    units = fact("units", "prefers metric units", "preference")
    say("metric please, always")
    model.push(ops({"op": "add", "category": "preference", "key": "system", "value": "prefers the metric system"}))
    assert review()["ops_skipped"] == 1
    operation = ReviewOperation.objects.get()
    assert (operation.code, operation.memory_id) == ("duplicate", units.id)
    assert "similar meaning" in operation.reason


def test_without_an_embedding_model_the_words_decide(model):
    fact("units", "prefers metric units", "preference")
    with model.configure('[fermix_core.embeddings]\nbackend = "none"\n'):
        say("metric please, always")
        model.push(ops({"op": "add", "category": "preference", "key": "system", "value": "prefers the metric system"},
                       {"op": "add", "category": "preference", "key": "again", "value": "Prefers metric units."}))
        result = review()
    assert (result["ops_added"], result["ops_skipped"]) == (1, 1)
    assert ReviewOperation.objects.get(status="skipped").code == "duplicate"


def test_only_rows_that_share_words_with_an_add_are_embedded():
    rows = ["lives in Lisbon", "has a dog named Rex"] + [f"loves jazz record {n}" for n in range(30)]
    assert duplicates.texts_to_embed(["is a marine biologist"], rows) == []
    texts = duplicates.texts_to_embed(["loves jazz music"], rows)
    assert texts[0] == "loves jazz music" and len(texts) == 1 + duplicates.MAX_EMBEDDED_ROWS
    assert duplicates.texts_to_embed(["loves jazz", "loves jazz music"], []) == ["loves jazz", "loves jazz music"]
