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
        rows = [
            [item.resource.resource_type, item.resource.scope_id, item.resource.current_revision,
             item.current.mutation_source if item.current else "-", item.current.byte_size if item.current else 0,
             when(item.current.created_at if item.current else None), _file(item.resource.resource_path)]
            for item in summaries
        ]
        self.stdout.write(f"Resources of agent {agent_id} (files under {conf.home}):\n")
        self.stdout.write(table(["TYPE", "SCOPE", "REV", "SOURCE", "BYTES", "UPDATED (UTC)", "FILE"], rows))
