from pathlib import Path

from fermix_site.conf import conf
from resources.cli import ResourceCommand, table, when
from resources.selectors import resource_list


def _file(path: str) -> str:
    if not path:
        return "-"
    try:
        return str(Path(path).relative_to(conf.home))
    except ValueError:
        return path


class Command(ResourceCommand):
    help = "List the agent's versioned resources with their current revision."

    def handle(self, *args, **options):
        agent_id = self.agent(options)
        self.sync(agent_id)
        summaries = resource_list(agent_id=agent_id)
        if not summaries:
            self.stdout.write(f"No resources recorded for agent {agent_id} yet. "
                              "Seed the bootstrap files with `python manage.py fermix_setup --noinput`.")
            return
        rows = []
        for item in summaries:
            resource, current = item.resource, item.current
            rows.append([
                resource.resource_type, resource.scope_id, resource.current_revision,
                current.mutation_source if current else "-", current.byte_size if current else 0,
                when(current.created_at if current else None), _file(resource.resource_path),
            ])
        self.stdout.write(f"Resources of agent {agent_id} (files under {conf.home}):\n")
        self.stdout.write(table(["TYPE", "SCOPE", "REV", "SOURCE", "BYTES", "UPDATED (UTC)", "FILE"], rows))
