import json

from django.core.management.base import BaseCommand, CommandError

from memory.prompt_files import prompt_files_rebuild_after_commit
from memory.rows import MemoryRowError, memory_restore
from memory.tools import memory_row_data


class Command(BaseCommand):
    help = "Un-archive a memory row; the prompt files are rebuilt so the fact reappears at once."

    def add_arguments(self, parser):
        parser.add_argument("id", type=int)
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args, **options):
        try:
            row = memory_restore(memory_id=options["id"], actor_type="operator", actor_id="memory_restore",
                                 reason="restored from the command line")
        except MemoryRowError as exc:
            raise CommandError(f"{exc} ({exc.code})") from None
        rebuild = prompt_files_rebuild_after_commit(agent_id=row.agent_id, trigger="memory_restore",
                                                    memory_ids=[row.id])
        shown_in = rebuild.shown_in(row.id)
        if rebuild.error:
            self.stderr.write(f"The row is restored, but the prompt files were not rebuilt ({rebuild.error}); "
                              "the next rebuild writes them.")
        if options["json"]:
            self.stdout.write(json.dumps({"restored": memory_row_data(row), "rendered_in": shown_in,
                                          "warnings": rebuild.warnings}))
        else:
            where = f"; it is in {', '.join(shown_in)}" if shown_in else "; it is not rendered into a prompt file"
            self.stdout.write(f"Restored memory #{row.id} ({row.category or 'note'}): {row.value}{where}")
