"""django-q2 tasks of the memory app. Thin: they take ids and call a service."""

from memory.models import Memory
from memory.prompt_files import prompt_files_rebuild


def rebuild_prompt_files_all():
    """The periodic rebuild (a schedule defined in code): every agent's USER.md and MEMORY.md."""
    agents = Memory.objects.values_list("agent_id", flat=True).distinct().order_by("agent_id")
    for agent_id in agents:
        prompt_files_rebuild(agent_id=agent_id, mutation_source="scheduler_rebuild", trigger="schedule")
