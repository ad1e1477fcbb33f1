"""The console index answers "does it need me?": counts, failed reviews, waiting directives, a provider
whose last call failed, disk space; read from what the service recorded, without a network call."""

import json

import pytest
from django.urls import reverse

from console.attention import last_model_call_outcomes
from memory.models import ReviewRun
from memory.reviewer import review_conversation
from memory.rows import memory_propose
from providers.models import ModelCall
from tests.fakeprovider import Reply, error, provider_config_toml, use_config
from tests.personas import say

pytestmark = [pytest.mark.django_db]

INDEX = reverse("admin:index")


def failing_review(fake_provider, conversation="telegram:42"):
    """A review run whose model call fails (the only provider answers 500)."""
    say("I have a new job at the harbour", conversation=conversation)
    fake_provider.push(error(500, "upstream exploded"))
    review_conversation(agent_id="main", conversation=conversation, force=True)
    return ReviewRun.objects.order_by("-id").first()


def test_with_nothing_wrong_the_index_says_nothing_needs_you(console, world):
    html = console.get(INDEX).content.decode()
    assert "Nothing needs you" in html
    assert "No failed review runs in the last 7 days" in html
    assert "Provider primary: last call ok at" in html
    assert "free under FERMIX_HOME" in html
    assert 'id="counts"' in html and "messages</a>" in html and "memory rows</a>" in html


def test_a_failed_review_and_a_failing_provider_need_you(console, home, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        run = failing_review(fake_provider)
        html = console.get(INDEX).content.decode()
    assert run.status == ReviewRun.Status.FAILED
    assert "Needs you:" in html
    assert "1 failed review run(s) in the last 7 days" in html
    assert "?status__exact=failed" in html
    assert "Provider primary is failing" in html and "upstream exploded" in html


def test_a_provider_that_recovered_is_ok_again(home, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        failing_review(fake_provider)
        assert [p.down for p in last_model_call_outcomes()] == [True]
        say("and I moved to Porto")
        fake_provider.push(Reply(text=json.dumps({"operations": []})))
        review_conversation(agent_id="main", conversation="telegram:42", force=True)
        outcomes = last_model_call_outcomes()
    assert [(p.provider, p.outcome, p.down) for p in outcomes] == [("primary", "ok", False)]


def test_a_configured_provider_never_called_is_listed_without_an_outcome(home, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        assert [(p.provider, p.outcome, p.configured) for p in last_model_call_outcomes()] == [("primary", "", True)]
    assert not ModelCall.objects.exists()


def test_waiting_directive_changes_are_listed_when_approval_is_on(console, home):
    memory_propose(op="add", agent_id="main", owner_id="default", scope_type="agent", scope_id="main",
                   key="rule", value="answer briefly", category="directive", actor_type="reviewer")
    assert "waiting for your approval" not in console.get(INDEX).content.decode()  # approval is off
    with use_config("[fermix_core.memory]\ndirective_approval = true\n"):
        html = console.get(INDEX).content.decode()
    assert "1 directive change(s) waiting for your approval" in html
    assert reverse("admin:memory_memory_changelist") + "?archived=pending" in html


def test_a_disk_below_the_floor_is_shown_as_full(console, home):
    with use_config("[fermix_core.storage]\nmin_free_mb = 10000000\n"):
        html = console.get(INDEX).content.decode()
    assert "Disk full:" in html and "Needs you:" in html


def test_what_a_provider_said_is_escaped_on_the_index(console, home):
    ModelCall.objects.create(call_id="c1", agent_id="main", agent_tag="turn", provider="primary", kind="openai",
                             model="m", outcome="failed", error='<script>alert("x")</script>')
    html = console.get(INDEX).content.decode()
    assert '<script>alert("x")' not in html and "&lt;script&gt;" in html
