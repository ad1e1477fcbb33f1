"""The dashboard draws its pictures from aggregate queries; every label is escaped."""

import pytest
from django.urls import reverse

from memory.compactor import record_peak
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
