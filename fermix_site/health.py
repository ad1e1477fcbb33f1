"""Database reachability, room left on the disk and the django-q2 cluster's heartbeat, for /healthz and doctor."""

from datetime import timedelta

from django.db import DatabaseError, connection
from django.utils import timezone

from fermix_site.models import Heartbeat
from fermix_site.queries import database_answers
from fermix_site.storage import storage_state

CLUSTER = "qcluster"
# The heartbeat schedule runs every minute; three missed beats mean the cluster is gone.
STALE_AFTER = timedelta(minutes=3)


def beat(name: str = CLUSTER, **detail) -> None:
    """Record that a process of this kind is alive now."""
    Heartbeat.objects.update_or_create(name=name, defaults={"seen_at": timezone.now(), "detail": detail})


def worker_state() -> dict:
    row = Heartbeat.objects.filter(name=CLUSTER).first()
    if row is None:
        return {"state": "never_seen", "last_heartbeat": None}
    age = timezone.now() - row.seen_at
    return {
        "state": "alive" if age <= STALE_AFTER else "stale",
        "last_heartbeat": row.seen_at.isoformat(),
        "age_seconds": round(age.total_seconds(), 1),
    }


def report() -> dict:
    """The service's state; `status` is "ok" only while the database answers and the disk has room."""
    try:
        database_answers(connection)
        database = {"ok": True, "vendor": connection.vendor}
        worker = worker_state()
    except DatabaseError as exc:
        database = {"ok": False, "vendor": connection.vendor, "error": str(exc)[:200]}
        worker = {"state": "unknown", "last_heartbeat": None}
    storage = storage_state()
    status = "ok" if database["ok"] and storage["ok"] else "error"
    return {"status": status, "database": database, "storage": storage, "worker": worker}


def worker_spawned(sender, proc_name=None, **kwargs):
    """django-q2's `post_spawn`: a worker that starts beats at once."""
    try:
        beat(proc=proc_name)
    except Exception:  # noqa: BLE001 - a heartbeat must never stop a worker from starting
        pass
