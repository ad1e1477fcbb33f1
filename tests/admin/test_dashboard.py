"""The dashboard draws its pictures from aggregate queries; every label is escaped."""

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from memory.compactor import record_peak
from memory.models import Memory
from memory.reviewer import review_conversation
from memory.rows import memory_archive, memory_propose
from tests.fakeprovider import Reply, provider_config_toml, use_config
from tests.personas import say

pytestmark = [pytest.mark.django_db]


def test_the_dashboard_draws_reviews_memory_context_and_revisions(console, world):
    record_peak(agent_id="main", conversation="telegram:42", peak_prompt_tokens=110_000, context_window=128_000)
    html = console.get(reverse("fermix-dashboard")).content.decode()
    for chart in ("chart-reviews", "chart-memory", "chart-context", "chart-revisions"):
        assert f'id="{chart}"' in html
    assert html.count("<svg xmlns") >= 4
    assert "ok: 1" in html  # one review run, ok
    assert "identity · owner: 1" in html and "preference · owner: 1" in html
    assert "main/telegram:42:root: 85.9% of the window" in html
    assert "1 conversation(s) at or over it" in html
    assert "SOUL.md" in html and "checkpoint" in html


def test_labels_from_users_are_escaped(console, home):
    chat = '<b>x&y"'  # a valid chat id: only spaces, ':', '/' and '\\' are refused
    say("hi", conversation=f"telegram:{chat}")
    record_peak(agent_id="main", conversation=f"telegram:{chat}", peak_prompt_tokens=90, context_window=100)
    html = console.get(reverse("fermix-dashboard")).content.decode()
    assert "<b>x" not in html
    assert "main/telegram:&lt;b&gt;x&amp;y&quot;:root" in html


def test_the_index_links_to_the_dashboard_and_settings(console, home):
    html = console.get(reverse("admin:index")).content.decode()
    assert reverse("fermix-dashboard") in html and reverse("fermix-settings") in html


def test_the_dashboard_shows_the_reviewers_quality(console, home, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        say("I like tea, and what is the weather like?")
        fake_provider.push(Reply(text=json.dumps({"operations": [
            {"op": "add", "category": "preference", "key": "drink", "value": "likes green tea"},
            {"op": "add", "category": "preference", "key": "drink2", "value": "likes green tea"},
            {"op": "add", "category": "context", "key": "weather", "value": "what is the weather like?"}]})))
        review_conversation(agent_id="main", conversation="telegram:42", force=True)
    tea = Memory.objects.get(key="drink")
    memory_archive(memory_id=tea.id, archived_by="ana", reason="not true")  # archived the day it was written
    old = Memory.objects.create(agent_id="main", owner_id="default", scope_type="owner", scope_id="default",
                                key="old", value="an old fact", category="identity",
                                created_at=timezone.now() - timedelta(days=20), updated_at=timezone.now())
    memory_archive(memory_id=old.id, archived_by="ana")  # weeks after it was written: not counted
    memory_propose(op="add", agent_id="main", owner_id="default", scope_type="agent", scope_id="main",
                   key="rule", value="answer briefly", category="directive", actor_type="reviewer")
    html = console.get(reverse("fermix-dashboard")).content.decode()
    assert 'id="chart-quality"' in html
    assert "applied: 1" in html and "skipped: duplicate: 1" in html and "skipped: question: 1" in html
    assert "Duplicates caught: 1" in html
    assert "rows archived or undone within 7 days of being written: 1" in html
    assert "directive changes waiting for approval: 1" in html
