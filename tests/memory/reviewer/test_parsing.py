"""Reading the model's answer: fenced JSON, nothing to save, prose as a failure kept on its run, the fallback provider
answering when the primary fails; every corpus answer through a real run; what cannot be read is skipped with its
code, never silently."""

import pytest

from memory.models import Memory, ReviewOperation, ReviewRun, ReviewState
from memory.review_ops import skipped_by_code
from memory.review_parse import derived_key
from tests.fakeprovider import Reply, error, provider_config_toml, use_config
from tests.memory.reviewer.conftest import review, say
from tests.memory.reviewer.corpus import CORPUS, NOTHING, UNPARSEABLE
from tests.personas import ops

pytestmark = pytest.mark.django_db


def test_fenced_json_is_accepted(model):
    say("I love jazz")
    model.push(Reply(text='Here you go:\n```json\n{"operations": [{"op": "add", "category": "interest", '
                          '"key": "music", "value": "loves jazz"}]}\n```'))
    assert review()["ops_added"] == 1


def test_nothing_to_save_advances_the_cursor(model):
    message = say("hello there")
    model.push(Reply(text="Nothing to save."))
    result = review()
    assert (result["status"], result["reason"]) == ("nothing_to_save", "the model found nothing to save")
    assert ReviewState.objects.get().cursor_message_id == message.id
    assert review()["reason"] == "no_new_messages"


def test_prose_is_a_failure_with_backoff_and_a_count(model):
    say("I like tea")
    model.push(Reply(text="The user seems to like tea, which is nice."))
    result = review()
    assert result["status"] == "failed" and "neither operations" in result["reason"]
    state = ReviewState.objects.get()
    assert (state.failure_count, state.cursor_message_id, state.claimed_by) == (1, 0, "")
    assert ReviewRun.objects.get().status == "failed"
    assert review(force=False)["reason"] == "failure_backoff"
    model.push(error(500))
    review()
    assert ReviewState.objects.get().failure_count == 2


def test_a_refused_answer_stays_on_the_failed_run(model):
    from providers.models import ModelCall

    say("I like tea")
    model.push(Reply(text="The user seems to like tea, which is nice."))
    assert review()["status"] == "failed"
    run = ReviewRun.objects.get()
    assert run.output == "The user seems to like tea, which is nice."
    assert run.model_call_id == ModelCall.objects.get().call_id


def test_failover_to_the_fallback_provider(model, fake_provider):
    text = provider_config_toml(fake_provider, fallbacks=[{"kind": "openai", "model": "fallback-model"}])
    with use_config(text):
        say("I like tea")
        fake_provider.push(error(503), model="primary-model")
        fake_provider.push(ops({"op": "add", "category": "preference", "key": "tea", "value": "likes tea"}),
                           model="fallback-model")
        assert review()["ops_added"] == 1


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_every_corpus_answer_ends_its_run_as_it_should(model, case):
    say("I work as a marine biologist")
    model.push(Reply(text=case.answer))
    result = review()
    if case.expect in (NOTHING, UNPARSEABLE):
        assert result["status"] == {NOTHING: "nothing_to_save", UNPARSEABLE: "failed"}[case.expect]
        return
    assert result["status"] == "ok"
    run = ReviewRun.objects.get()
    assert run.operations.count() == len(case.expect)  # every proposed item is recorded, applied or skipped
    expected_skips = [e[1] for e in case.expect if isinstance(e, tuple)]
    recorded = [op.code for op in run.operations.order_by("index") if op.code in expected_skips]
    assert recorded == expected_skips


def test_an_add_without_a_key_is_stored_under_a_stable_derived_key(model):
    say("I work as a marine biologist")
    model.push(ops({"op": "add", "category": "identity", "value": "works as a marine biologist"}))
    assert review()["ops_added"] == 1
    row = Memory.objects.get()
    assert row.key == derived_key("identity", "works as a marine biologist")
    operation = ReviewOperation.objects.get()
    assert [n["code"] for n in operation.notes] == ["key_derived"]
    say("yes, a marine biologist")
    model.push(ops({"op": "add", "category": "identity", "value": "works as a marine biologist"}))
    result = review()
    assert (result["ops_added"], result["ops_skipped"]) == (0, 1)
    assert Memory.objects.count() == 1


def test_an_operation_that_cannot_be_understood_is_skipped_with_its_code(model):
    say("I have a sister in Berlin")
    model.push(ops({"op": "add", "key": "family", "value": "has a sister in Berlin"}, "and a brother"))
    result = review()
    assert (result["status"], result["ops_skipped"]) == ("ok", 2)
    skipped = list(ReviewOperation.objects.order_by("index").values_list("status", "code", "reason"))
    assert [(s, c) for s, c, _ in skipped] == [("skipped", "missing_category"), ("skipped", "malformed")]
    assert all(reason.startswith(code + ": ") for _, code, reason in skipped)


def test_skip_codes_are_counted_per_run(model):
    say("I love jazz")
    model.push(ops({"op": "add", "category": "interest", "key": "stuff", "value": "likes stuff"},
                   {"op": "add", "category": "mood", "key": "k", "value": "is happy"},
                   {"op": "add", "category": "interest", "key": "things", "value": "likes things"}))
    review()
    run = ReviewRun.objects.get()
    assert skipped_by_code([run.id]) == {run.id: {"says_nothing": 2, "invalid_category": 1}}
