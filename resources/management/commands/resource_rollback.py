from django.core.management.base import CommandError

from resources.catalog import check_scope, check_type, display_name, rollback_caveat
from resources.cli import ResourceCommand, positive_int
from resources.diff import revision_label, unified_diff
from resources.errors import CheckpointRollback
from resources.models import ResourceType
from resources.selectors import resource_revision_get
from resources.services import resource_rollback


class Command(ResourceCommand):
    help = ("Roll a file-backed resource back to revision REV: shows the diff, asks for confirmation, then "
            "writes a new `rollback` revision and the file.")
    scoped = True  # only to answer `checkpoint --scope KEY` with the checkpoint refusal

    def add_arguments(self, parser):
        parser.add_argument("type", help="resource type, e.g. soul_md, user_md (not checkpoint)")
        parser.add_argument("revision", type=positive_int, help="the revision whose content to restore")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation (scripts)")
        super().add_arguments(parser)

    def handle(self, *args, **options):
        agent_id, resource_type, number = self.agent(options), check_type(options["type"]), options["revision"]
        if resource_type == ResourceType.CHECKPOINT:
            raise CheckpointRollback("checkpoint revisions are audit and history records only; "
                                     "they cannot be rolled back")
        check_scope(resource_type, options.get("scope"))
        self.sync(agent_id, resource_type)
        target = resource_revision_get(agent_id=agent_id, resource_type=resource_type, revision=number)
        current = resource_revision_get(agent_id=agent_id, resource_type=resource_type)
        if current.content_hash != target.content_hash:
            self.preview(current, target)
            if not options["yes"] and not self.confirmed(resource_type, target.revision):
                raise CommandError("rollback cancelled; nothing was written")
        self.report(resource_rollback(agent_id=agent_id, resource_type=resource_type, revision=number))

    def preview(self, current, target):
        self.stdout.write(f"Rolling back {current.resource_type} from r{current.revision} to the content of "
                          f"r{target.revision}:\n")
        self.stdout.write(unified_diff(current.content, target.content, from_label=revision_label(current),
                                       to_label=revision_label(target)), ending="")
        caveat = rollback_caveat(current.resource_type)
        if caveat:
            self.stdout.write(f"\n{caveat}")  # before the question: it may change the answer

    def confirmed(self, resource_type, number) -> bool:
        try:
            answer = input(f"\nWrite the content of r{number} to {display_name(resource_type)} as a new revision? "
                           "[y/N] ")
        except EOFError:
            self.stderr.write("\nno answer on stdin; pass --yes to roll back without the prompt")
            return False
        return answer.strip().lower() in {"y", "yes"}

    def report(self, result):
        name = display_name(result.resource_type)
        if result.already_at_target:
            self.stdout.write(f"{result.resource_type} is already at the content of r{result.target_revision} "
                              f"(current revision r{result.from_revision}); nothing was written.")
            return
        self.stdout.write(f"Rolled back {result.resource_type}: new revision r{result.revision.revision} has the "
                          f"content of r{result.target_revision} (previous r{result.from_revision}); {name} "
                          "rewritten.")
        self.stdout.write("Cached prompts are rebuilt on their next use in every process; no restart needed.")
