import json

from django.core.management.base import BaseCommand, CommandError

from fermix_site.conf import conf, valid_id
from memory.conversations import ConversationError, ConversationKey
from memory.reviewer import ReviewBusy, review_now


class Command(BaseCommand):
    help = "Review conversations with new messages now, past the review interval and failure backoff."

    def add_arguments(self, parser):
        parser.add_argument("--now", action="store_true", required=True,
                            help="run now (required: background reviews run on their own interval)")
        parser.add_argument("--conversation", help="only this conversation key, e.g. telegram:12345")
        parser.add_argument("--agent", default=None, help="the agent (default: [fermix_core.memory] agent_id)")
        parser.add_argument("--owner", default=None, help="only conversations of this owner")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args, **options):
        agent_id = options["agent"] or conf.memory.agent_id
        if not valid_id(agent_id):
            raise CommandError(f"--agent {agent_id!r} is invalid: use 1-64 of A-Z a-z 0-9 _ . -")
        if options["owner"] and not valid_id(options["owner"]):
            raise CommandError(f"--owner {options['owner']!r} is invalid: use 1-64 of A-Z a-z 0-9 _ . -")
        try:
            if options["conversation"]:
                ConversationKey.parse(options["conversation"])
            progress = None if options["json"] else self._progress
            report = review_now(agent_id=agent_id, conversation=options["conversation"], owner_id=options["owner"],
                                progress=progress)
        except ConversationError as exc:
            raise CommandError(str(exc)) from None
        except ReviewBusy as exc:
            raise CommandError(f"{exc}; try again when it finishes") from None
        failed = sum(1 for r in report["results"] if r["status"] == "failed")
        if options["json"]:
            self.stdout.write(json.dumps(report))
        elif not report["results"]:
            self.stdout.write("No conversation has new messages to review.")
        else:
            totals = {s: sum(1 for r in report["results"] if r["status"] == s)
                      for s in ("ok", "nothing_to_save", "skipped", "failed")}
            self.stdout.write(f"Reviewed {report['total']} conversation(s): "
                              + ", ".join(f"{n} {s}" for s, n in totals.items() if n))
        if failed:
            where = "in the JSON above" if options["json"] else "above"
            raise CommandError(f"{failed} review(s) failed; see the reasons {where}")

    def _progress(self, index, total, result):
        ops = (f"+{result['ops_added']} ~{result['ops_replaced']} -{result['ops_archived']} "
               f"skipped {result['ops_skipped']}")
        reason = f" ({result['reason']})" if result["reason"] else ""
        self.stdout.write(f"[{index}/{total}] {result['conversation']}: {result['status']}{reason} "
                          f"{ops}; {result['input_messages']} message(s), {result['input_tokens']} tokens")
