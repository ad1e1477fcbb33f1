import itertools
import json
import sys

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from fermix_site.progress import Progress
from memory.portability import PortabilityError, memory_import, memory_import_lines


class Command(BaseCommand):
    help = ("Read a memory_export file into this (empty) install, streaming it in one transaction; nothing is "
            "written if any row conflicts or the file is cut off. Exports of versions 1 and 2 (one JSON document) "
            "are read too.")

    def add_arguments(self, parser):
        parser.add_argument("file", help="the export file ('-' for standard input)")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--every", type=int, default=10_000, metavar="N",
                            help="off a terminal, a progress line every N rows (default 10000)")

    def handle(self, *args, **options):
        name = options["file"]
        try:
            fh = sys.stdin if name == "-" else open(name, encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise CommandError(f"cannot read {name}: {exc}") from None
        try:
            total = 0 if name == "-" else _count_lines(name) - 2  # less the header and the row count
            progress = Progress(self.stderr, total, every=options["every"], label="imported")
            report = self.read(fh, progress)
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {name}: {exc}") from None
        except PortabilityError as exc:
            raise CommandError(str(exc)) from None
        except IntegrityError as exc:  # a reference checked at commit: the transaction is rolled back
            raise CommandError(f"the export's rows do not fit together ({exc}); nothing was written") from None
        finally:
            if fh is not sys.stdin:
                fh.close()
        progress.finish()
        if options["json"]:
            self.stdout.write(json.dumps(report))
        else:
            rows = ", ".join(f"{n} {label}" for label, n in sorted(report["imported"].items()))
            self.stdout.write(f"Imported {rows or 'nothing'}; agents: {', '.join(report['agents']) or 'none'}")

    @staticmethod
    def read(fh, progress):
        """A version 3 export streams; an older one is a single JSON document, read whole."""
        first = fh.readline()
        try:
            header = json.loads(first)
        except ValueError:
            header = None
        if isinstance(header, dict) and header.get("version") not in (None, 1, 2) and "objects" not in header:
            return memory_import_lines(itertools.chain([first], fh), progress=progress.update)
        try:
            document = json.loads(first + fh.read())
        except ValueError as exc:
            raise PortabilityError("invalid_document", f"this is not a Fermix export: {exc}") from None
        return memory_import(document)


def _count_lines(name: str) -> int:
    count = 0
    with open(name, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            count += block.count(b"\n")
    return count
