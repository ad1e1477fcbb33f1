import json

from django.core.management.base import BaseCommand, CommandError

from memory.models import Memory
from memory.provenance import messages_label
from memory.rows import memory_history


class Command(BaseCommand):
    help = "Show every change to a memory row: before and after values, who, why and when."

    def add_arguments(self, parser):
        parser.add_argument("id", type=int)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        row = Memory.objects.filter(pk=options["id"]).first()
        if row is None:
            raise CommandError(f"memory row {options['id']} does not exist")
        events = [
            {"at": e.created_at.isoformat(), "action": e.action, "before": e.before_value, "after": e.after_value,
             "actor": f"{e.actor_type}:{e.actor_id}".rstrip(":"), "reason": e.reason,
             "message_ids": list(e.message_ids), "messages": messages_label(list(e.message_ids), e.run)}
            for e in memory_history(memory_id=row.id).select_related("run")
        ]
        if options["json"]:
            self.stdout.write(json.dumps({"id": row.id, "key": row.key, "events": events}))
            return
        state = "archived" if row.archived_at else "live"
        self.stdout.write(f"memory #{row.id} {row.key!r} ({row.category or 'note'}, {row.scope_type}, {state})")
        for e in events:
            change = e["after"] if e["before"] in (None, e["after"]) else f"{e['before']!r} -> {e['after']!r}"
            why = "; ".join(part for part in (e["reason"], e["messages"]) if part)
            self.stdout.write(f"  {e['at'][:19]}  {e['action']:<8} {e['actor']:<24} {change}"
                              + (f"  ({why})" if why else ""))
