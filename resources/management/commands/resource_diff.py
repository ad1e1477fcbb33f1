import os

from resources.cli import ResourceCommand, non_negative_int, positive_int
from resources.diff import coloured, revision_diff
from resources.selectors import resource_revision_get

COLOR_CHOICES = ("auto", "always", "never")


class Command(ResourceCommand):
    help = "Print a unified diff between two revisions of a resource."
    scoped = True

    def add_arguments(self, parser):
        parser.add_argument("type", help="resource type, e.g. soul_md, user_md, checkpoint")
        parser.add_argument("rev_a", type=positive_int, help="the older revision")
        parser.add_argument("rev_b", type=positive_int, help="the newer revision")
        parser.add_argument("--context", type=non_negative_int, default=3, metavar="N",
                            help="lines of context around each change (default 3)")
        parser.add_argument("--color", choices=COLOR_CHOICES, default="auto",
                            help="colour the diff: auto (when the output is a terminal and NO_COLOR is not set, "
                                 "the default), always or never")
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
        self.stdout.write(coloured(diff) if self.in_colour(options) else diff, ending="")

    def in_colour(self, options) -> bool:
        # Django's own --no-color and --force-color say the same for every command; --color is ours.
        choice = options["color"]
        if choice == "auto" and options.get("no_color"):
            return False
        if choice == "auto" and options.get("force_color"):
            return True
        if choice == "auto":
            return self.stdout.isatty() and not os.environ.get("NO_COLOR")
        return choice == "always"
