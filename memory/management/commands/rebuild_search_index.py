from django.core.management.base import BaseCommand
from django.db import connection, transaction

from fermix_site.progress import Progress
from memory import days, fts


class Command(BaseCommand):
    help = ("Re-create missing FTS triggers and rebuild the full-text mirrors from messages and memories, and "
            "refill message_days (on PostgreSQL only that); --optimize only merges each mirror's segments into "
            "one, in short steps.")

    def add_arguments(self, parser):
        parser.add_argument("--optimize", action="store_true",
                            help="merge the index segments (what the daily schedule does) instead of rebuilding")

    def handle(self, *args, **options):
        if connection.vendor != "sqlite":
            with transaction.atomic(), connection.cursor() as cursor:
                days.install(cursor, connection.vendor)
            self.stdout.write("PostgreSQL keeps its search vectors itself; re-created the trigger of "
                              f"{days.TABLE} and refilled it.")
            return
        if options["optimize"]:
            after = fts.optimize(connection)
            self.stdout.write("optimized: " + ", ".join(f"{name} ({n} segment{'s' * (n != 1)})"
                                                        for name, n in after.items()))
            return
        bar = Progress(self.stdout, len(fts.MIRRORS), unit="mirror", every=1, label="rebuilt")
        with transaction.atomic():
            repaired = fts.repair(connection)
            rebuilt = fts.rebuild(connection, progress=bar.update)
        bar.finish()
        if repaired:
            self.stdout.write(f"re-created: {', '.join(repaired)}")
        self.stdout.write(f"rebuilt: {', '.join(rebuilt)}")
        bad = fts.integrity_check(connection)
        if bad:
            raise SystemExit(f"integrity check failed for: {', '.join(bad)}")
        self.stdout.write("integrity check: ok")
