"""django-q2 tasks of the site itself."""

from django.db import connection

from fermix_site import health


def heartbeat():
    """Scheduled every minute: proves to /healthz and doctor that the cluster runs tasks, and on SQLite
    copies the WAL back into the database (a PASSIVE checkpoint: it waits for no reader or writer), so
    no request's commit has to."""
    health.beat()
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
