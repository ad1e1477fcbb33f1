from django.core.management.base import BaseCommand, CommandError

from fermix_site.conf import conf
from fermix_site.progress import Progress
from fermix_site.storage import NoRoom, keeping_room
from memory.portability import PortabilityError, export_lines, export_path, export_size
from resources.files import write_atomic


class Command(BaseCommand):
    help = ("Export an agent's or an owner's messages, memories, their histories, review runs, model calls and "
            "resource revisions as JSON Lines (to standard output, or to $FERMIX_HOME/exports/NAME with --output "
            "NAME). Without --agent or --owner: the configured agent. Progress goes to standard error.")

    def add_arguments(self, parser):
        parser.add_argument("--agent", metavar="ID", help="agent id (default: the configured agent_id, unless --owner "
                            "is given: then every agent's rows of that owner)")
        parser.add_argument("--owner", metavar="ID")
        parser.add_argument("--output", metavar="NAME", help="a file name under $FERMIX_HOME/exports/")
        parser.add_argument("--every", type=int, default=10_000, metavar="N",
                            help="off a terminal, a progress line every N rows (default 10000)")

    def handle(self, *args, **options):
        agent_id = options["agent"] or (None if options["owner"] else conf.memory.agent_id)
        selection = {"agent_id": agent_id, "owner_id": options["owner"]}
        try:
            path = export_path(options["output"]) if options["output"] else None
            progress = Progress(self.stderr, export_size(**selection), every=options["every"], label="exported")
            lines = export_lines(**selection, progress=progress.update)
            if path is None:
                for line in lines:
                    self.stdout.write(line)
            else:
                write_atomic(path, keeping_room(path, (line.encode("utf-8") + b"\n" for line in lines)))
        except PortabilityError as exc:
            raise CommandError(str(exc)) from None
        except NoRoom as exc:
            raise CommandError(f"the export stopped and nothing was written: {exc}. Free some space, or export to "
                               "standard output (without --output) onto another disk") from None
        progress.finish()
        if path is not None:
            self.stderr.write(f"wrote {progress.done:,} row(s) to {path}")
