"""Reading the model's answer: fenced JSON, nothing to save, prose as a failure kept on its run, the fallback provider
answering when the primary fails."""

import pytest

from memory.models import ReviewRun, ReviewState
from tests.fakeprovider import Reply, error, provider_config_toml, use_config
from tests.memory.reviewer.conftest import review, say
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
