"""API keys (shown once, revoked after a confirmation) and the read-only jobs pages."""

import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from api.models import ApiKey
from jobs.models import JobRun

pytestmark = [pytest.mark.django_db]


def test_creating_a_key_shows_it_once_and_stores_only_its_hash(console, home):
    response = console.post(reverse("admin:api_apikey_add"), {"name": "cli", "role": "operator", "agents": "main, ops"})
    html = response.content.decode()
    key = re.search(r'id="new-key">(fmx_[^<]+)<', html).group(1)
    assert "no-store" in response["Cache-Control"]
    row = ApiKey.objects.get(name="cli")
    assert row.matches(key) and row.key_hash != key and row.agents == ["main", "ops"]
    for url in (reverse("admin:api_apikey_changelist"), reverse("admin:api_apikey_change", args=[row.pk])):
        assert key not in console.get(url).content.decode()


def test_a_key_that_may_assert_operator_trust_is_created_and_shown_as_such(console, home):
    html = console.post(reverse("admin:api_apikey_add"), {"name": "dm-bot", "role": "channel",
                                                          "may_assert_operator": "on"}).content.decode()
    assert "may assert operator trust" in html
    row = ApiKey.objects.get(name="dm-bot")
    assert row.may_assert_operator is True
    change = console.get(reverse("admin:api_apikey_change", args=[row.pk])).content.decode()
    assert "May assert operator" in change and 'alt="True"' in change
    changelist = console.get(reverse("admin:api_apikey_changelist"), {"may_assert_operator__exact": "1"})
    assert "dm-bot" in changelist.content.decode()
    refused = console.post(reverse("admin:api_apikey_add"), {"name": "ops", "role": "operator",
                                                             "may_assert_operator": "on"}).content.decode()
    assert "only a channel key" in refused and not ApiKey.objects.filter(name="ops").exists()


def test_a_taken_name_is_refused_with_a_message(console, home):
    console.post(reverse("admin:api_apikey_add"), {"name": "cli", "role": "channel"})
    html = console.post(reverse("admin:api_apikey_add"), {"name": "cli", "role": "channel"}).content.decode()
    assert "already exists" in html and ApiKey.objects.count() == 1


def test_revoking_asks_for_a_confirmation(console, world):
    row = ApiKey.objects.get(name=world.key_name)
    url = reverse("admin:api_apikey_changelist")
    selection = {"action": "revoke_selected", ACTION_CHECKBOX_NAME: [row.pk]}
    assert "Yes, revoke" in console.post(url, selection).content.decode()
    assert ApiKey.objects.get(pk=row.pk).revoked_at is None
    console.post(url, {**selection, "post": "yes"})
    assert ApiKey.objects.get(pk=row.pk).revoked_at is not None


def test_jobs_show_their_schedule_and_runs(console, world):
    html = console.get(reverse("admin:jobs_scheduledjob_change", args=[world.job.pk])).content.decode()
    assert "every 3600 s" in html and "Summarise the news" in html
    run = JobRun.objects.get()
    runs = console.get(reverse("admin:jobs_jobrun_changelist"), {"job": world.job.pk}).content.decode()
    assert f"/admin/jobs/jobrun/{run.pk}/change/" in runs
