import json
import sys

from django.core.management.base import BaseCommand, CommandError

from memory.portability import PortabilityError, memory_import


class Command(BaseCommand):
    help = "Read a memory_export document into this (empty) install; nothing is written if any row conflicts."

    def add_arguments(self, parser):
        parser.add_argument("file", help="the export file ('-' for standard input)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        try:
            if options["file"] == "-":
                text = sys.stdin.read()
            else:
                with open(options["file"], encoding="utf-8") as fh:
                    text = fh.read()
            document = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CommandError(f"cannot read {options['file']}: {exc}") from None
        try:
            report = memory_import(document)
        except PortabilityError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(report))
        else:
            rows = ", ".join(f"{n} {label}" for label, n in sorted(report["imported"].items()))
            self.stdout.write(f"Imported {rows or 'nothing'}; agents: {', '.join(report['agents']) or 'none'}")
