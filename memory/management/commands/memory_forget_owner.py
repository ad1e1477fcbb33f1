import json
import sys

from django.core.management.base import BaseCommand, CommandError

from memory.erasure import ErasureError, memory_forget_owner


class Command(BaseCommand):
    help = ("Erase an owner: delete every message and memory row, redact past USER.md/MEMORY.md revisions "
            "and checkpoints to tombstones (hashes kept), re-render the prompt files. Irreversible.")

    def add_arguments(self, parser):
        parser.add_argument("owner")
        parser.add_argument("--agent", help="only in this agent (default: every agent)")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        owner = options["owner"]
        if not options["yes"]:
            if not sys.stdin.isatty():
                raise CommandError("refusing to erase without confirmation: pass --yes")
            answer = input(f"Erase every message and memory of owner {owner!r}? This cannot be undone. "
                           "Type the owner id to confirm: ")
            if answer.strip() != owner:
                raise CommandError("not confirmed; nothing was erased")
        try:
            report = memory_forget_owner(owner_id=owner, agent_id=options["agent"])
        except ErasureError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict()))
            return
        self.stdout.write(
            f"Erased owner {owner}: {report.messages} message(s), {report.memories} memory row(s), "
            f"{report.conversations} conversation(s), {report.review_runs} review run(s); "
            f"{report.revisions_redacted} revision(s) redacted; agents: {', '.join(report.agents) or 'none'}")
