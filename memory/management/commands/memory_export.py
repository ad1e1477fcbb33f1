import json

from django.core.management.base import BaseCommand, CommandError

from memory.portability import PortabilityError, export_path, memory_export
from resources.files import write_atomic


class Command(BaseCommand):
    help = ("Export an agent's or an owner's messages, memories, their histories and resource revisions as "
            "JSON (to standard output, or to $FERMIX_HOME/exports/NAME with --output NAME).")

    def add_arguments(self, parser):
        parser.add_argument("--agent")
        parser.add_argument("--owner")
        parser.add_argument("--output", help="a file name under $FERMIX_HOME/exports/")

    def handle(self, *args, **options):
        try:
            document = memory_export(agent_id=options["agent"], owner_id=options["owner"])
            text = json.dumps(document, ensure_ascii=False)
            if options["output"]:
                path = export_path(options["output"])

                write_atomic(path, text.encode("utf-8"))
                self.stderr.write(f"wrote {len(document['objects'])} row(s) to {path}")
            else:
                self.stdout.write(text)
        except PortabilityError as exc:
            raise CommandError(str(exc)) from None
