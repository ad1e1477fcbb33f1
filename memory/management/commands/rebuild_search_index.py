from django.core.management.base import BaseCommand
from django.db import connection, transaction

from memory import fts


class Command(BaseCommand):
    help = "Re-create missing FTS triggers and rebuild the full-text mirrors from messages and memories."

    def handle(self, *args, **options):
        if connection.vendor != "sqlite":
            self.stdout.write("PostgreSQL keeps its search vectors itself; nothing to rebuild.")
            return
        with transaction.atomic():
            repaired = fts.repair(connection)
            rebuilt = fts.rebuild(connection)
        if repaired:
            self.stdout.write(f"re-created: {', '.join(repaired)}")
        self.stdout.write(f"rebuilt: {', '.join(rebuilt)}")
        bad = fts.integrity_check(connection)
        if bad:
            raise SystemExit(f"integrity check failed for: {', '.join(bad)}")
        self.stdout.write("integrity check: ok")
