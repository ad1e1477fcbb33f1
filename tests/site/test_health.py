"""/healthz answers without authentication with database, storage and worker state."""

import dataclasses
import os
from datetime import timedelta

import pytest
from django.utils import timezone

from fermix_site import health, storage
from fermix_site.conf import StorageConf, conf
from fermix_site.models import Heartbeat

pytestmark = pytest.mark.django_db


def test_healthz_needs_no_key_and_reports_database_and_worker(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["database"]["ok"] is True
    assert body["worker"] == {"state": "never_seen", "last_heartbeat": None}


def test_a_recent_heartbeat_is_alive_and_an_old_one_stale(client):
    health.beat()
    assert client.get("/healthz").json()["worker"]["state"] == "alive"
    Heartbeat.objects.update(seen_at=timezone.now() - timedelta(minutes=10))
    assert client.get("/healthz").json()["worker"]["state"] == "stale"


def test_healthz_refuses_other_methods(client):
    assert client.post("/healthz").status_code == 405


def test_the_heartbeat_schedule_is_defined_in_code():
    from django_q.models import Schedule

    schedule = Schedule.objects.get(name="fermix-heartbeat")
    assert (schedule.func, schedule.schedule_type, schedule.minutes) == ("fermix_site.tasks.heartbeat", "I", 1)


def test_the_admin_asks_anonymous_users_to_log_in(client):
    response = client.get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_healthz_reports_the_free_space_under_fermix_home(client, home):
    storage = client.get("/healthz").json()["storage"]
    stats = os.statvfs(home.home)
    assert storage["ok"] is True
    assert abs(storage["free_bytes"] - stats.f_bavail * stats.f_frsize) < 64 * 1024 * 1024


def test_healthz_is_503_while_less_than_min_free_mb_is_free(client, home):
    with conf.use(dataclasses.replace(home, storage=StorageConf(min_free_mb=10**7))):  # 10 TB
        response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "error" and body["database"]["ok"] is True
    assert body["storage"]["ok"] is False and body["storage"]["free_bytes"] > 0
    assert client.get("/healthz").status_code == 200


def test_a_cache_has_room_only_above_the_space_kept_free(home):
    free = storage.free_bytes(home.home)
    not_yet = home.home / "cache" / "vectors" / "main"  # asked of its nearest folder that exists
    assert storage.room_for(not_yet, 1024) and storage.room_for(not_yet, 1024, keep_free=0)
    assert not storage.room_for(not_yet, free + 2**30, keep_free=0)  # more than the disk has
    with conf.use(dataclasses.replace(home, storage=StorageConf(min_free_mb=(free >> 20) + 1))):
        assert not storage.room_for(not_yet, 1)  # the service's own margin would be taken
    assert not not_yet.exists()
