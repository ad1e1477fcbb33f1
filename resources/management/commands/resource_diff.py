from resources.cli import ResourceCommand, non_negative_int, positive_int
from resources.diff import revision_diff
from resources.selectors import resource_revision_get


class Command(ResourceCommand):
    help = "Print a unified diff between two revisions of a resource."
    scoped = True

    def add_arguments(self, parser):
        parser.add_argument("type", help="resource type, e.g. soul_md, user_md, checkpoint")
        parser.add_argument("rev_a", type=positive_int, help="the older revision")
        parser.add_argument("rev_b", type=positive_int, help="the newer revision")
        parser.add_argument("--context", type=non_negative_int, default=3, metavar="N",
                            help="lines of context around each change (default 3)")
        super().add_arguments(parser)

    def handle(self, *args, **options):
        self.sync(self.agent(options), options["type"])
        key = {"agent_id": self.agent(options), "resource_type": options["type"], "scope_id": options.get("scope")}
        a = resource_revision_get(**key, revision=options["rev_a"])
        b = resource_revision_get(**key, revision=options["rev_b"])
        diff = revision_diff(a, b, context=options["context"])
        if not diff:
            self.stdout.write(f"r{a.revision} and r{b.revision} of {a.resource_type} have identical content.")
            return
        self.stdout.write(diff, ending="")
