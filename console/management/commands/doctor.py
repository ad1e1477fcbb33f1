import json

from django.core.management.base import BaseCommand, CommandError

from console.doctor import ERROR, doctor_report


class Command(BaseCommand):
    help = ("Check the installation: configuration, FERMIX_HOME and its free space, the model providers (each asked "
            "for its model list, 3 s at most), database schema, FTS triggers, WAL and durability, revision hashes, "
            "prompt files, bootstrap template drift, the django-q2 cluster, embeddings coverage, the last model "
            "call and the reviews that failed in the last 24 hours. Exits 1 when a check fails.")
    requires_system_checks = []  # doctor reports problems itself instead of refusing to start

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the results as JSON")

    def handle(self, *args, **options):
        report = doctor_report()
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self.print_text(report)
        errors = [c for c in report["checks"] if c["status"] == ERROR]
        if errors:
            raise CommandError(f"{len(errors)} check(s) failed: {', '.join(c['name'] for c in errors)}")

    def print_text(self, report):
        style = {"ok": self.style.SUCCESS, "warning": self.style.WARNING, "error": self.style.ERROR}
        width = max(len(c["name"]) for c in report["checks"])
        for check in report["checks"]:
            status = style[check["status"]](check["status"].ljust(7))
            self.stdout.write(f"{status}  {check['name'].ljust(width)}  {check['message']}")
        self.stdout.write(f"\noverall: {style[report['status']](report['status'])}")
