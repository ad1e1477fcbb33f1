from resources.cli import ResourceCommand, positive_int, when
from resources.selectors import resource_revision_get


class Command(ResourceCommand):
    help = ("Print a resource's current content, or revision REV. The content goes to stdout exactly as "
            "stored; a one-line header goes to stderr.")
    scoped = True

    def add_arguments(self, parser):
        parser.add_argument("type", help="resource type, e.g. soul_md, user_md, checkpoint")
        parser.add_argument("revision", nargs="?", type=positive_int, help="revision number (default: current)")
        super().add_arguments(parser)

    def handle(self, *args, **options):
        self.sync(self.agent(options), options["type"])
        revision = resource_revision_get(
            agent_id=self.agent(options), resource_type=options["type"], revision=options["revision"],
            scope_id=options.get("scope"),
        )
        scope = "" if revision.scope_id == "global" else f" [{revision.scope_id}]"
        self.stderr.write(
            f"# {revision.resource_type}{scope} r{revision.revision} · {revision.mutation_source} · "
            f"{when(revision.created_at)} UTC · {revision.byte_size} bytes · sha256 {revision.content_hash[:12]}"
        )
        self.stdout.write(revision.content, ending="")
