from resources.cli import ResourceCommand, positive_int, provenance_text, table, when
from resources.selectors import resource_get, resource_revision_list


class Command(ResourceCommand):
    help = "Print a resource's revisions, newest first, with their source and provenance."
    scoped = True

    def add_arguments(self, parser):
        parser.add_argument("type", help="resource type, e.g. soul_md, user_md, checkpoint")
        parser.add_argument("--limit", type=positive_int, metavar="N", help="show only the newest N revisions")
        super().add_arguments(parser)

    def handle(self, *args, **options):
        agent_id, resource_type = self.agent(options), options["type"]
        self.sync(agent_id, resource_type)
        resource = resource_get(agent_id=agent_id, resource_type=resource_type, scope_id=options.get("scope"))
        revisions = resource_revision_list(agent_id=agent_id, resource_type=resource_type,
                                           scope_id=resource.scope_id, limit=options["limit"])
        scope = "" if resource.scope_id == "global" else f" [{resource.scope_id}]"
        shown = f", showing the newest {len(revisions)}" if len(revisions) < resource.current_revision else ""
        self.stdout.write(f"{resource_type}{scope} of agent {agent_id}: {resource.current_revision} revision(s), "
                          f"current r{resource.current_revision}{shown}\n")
        rows = [
            [f"{'*' if r.revision == resource.current_revision else ' '} {r.revision}",
             r.parent_revision or "-", r.mutation_source, r.byte_size, r.content_hash[:12],
             when(r.created_at), provenance_text(r.provenance)]
            for r in revisions
        ]
        self.stdout.write(table(["  REV", "PARENT", "SOURCE", "BYTES", "SHA-256", "CREATED (UTC)", "PROVENANCE"],
                                rows))
