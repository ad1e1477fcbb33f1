"""/healthz answers without authentication with database and worker state."""

import sqlite3
from contextlib import closing
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from fermix_site import health
from fermix_site.models import Heartbeat

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


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


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite WAL")
def test_the_heartbeat_copies_the_wal_into_the_database_so_no_commit_has_to():
    from fermix_site.settings import WAL_AUTOCHECKPOINT_PAGES
    from fermix_site.tasks import heartbeat
    from memory.models import Message

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_autocheckpoint")
        assert cursor.fetchone()[0] == WAL_AUTOCHECKPOINT_PAGES
    path = connection.settings_dict["NAME"]

    def in_database_file():  # `immutable` reads the database file alone, not the WAL
        with closing(sqlite3.connect(f"file:{path}?immutable=1", uri=True)) as db:
            return db.execute("SELECT count(*) FROM messages WHERE content = 'walnut harbor'").fetchone()[0]

    heartbeat()  # the schema itself may still be in the WAL
    Message.objects.create(agent_id="main", channel="t", chat_id="1", role="user", content="walnut harbor",
                           created_at=timezone.now())
    assert in_database_file() == 0  # committed, but only to the WAL
    heartbeat()
    assert in_database_file() == 1
    Message.objects.all().delete()
