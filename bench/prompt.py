"""The composed system prompt (cached and uncached) and the prompt-file rebuild, for an owner with 10,000
memory rows, each through the service against its absolute budget."""

from __future__ import annotations

import itertools

from bench.dataset import MAIN_AGENT, MAIN_OWNER
from bench.report import Figure, against_budget
from bench.timing import Stopwatch

CACHED_MS, UNCACHED_MS, REBUILD_MS = 5, 20, 20
PROMPT_FILES = ("user_md", "memory_md")


def measure_compose(data, repeat: int) -> list[Figure]:
    from django.db import connection

    from fermix_site import generations
    from memory.prompt import compose_system_prompt

    def uncached():
        generations.clear_all()
        compose_system_prompt(agent_id=MAIN_AGENT)

    warm = min(20, repeat)
    cached = Stopwatch().time(lambda: compose_system_prompt(agent_id=MAIN_AGENT), repeat, warm)
    cold = Stopwatch().time(uncached, repeat, warm)
    fresh = _with_files_aside(lambda: Stopwatch().time(uncached, max(20, repeat // 10), 5))
    connection.close()
    rows = f"{data.main_owner_rows:,} rows for the owner"
    return [
        against_budget("composed prompt, cached", cached, CACHED_MS, rows),
        against_budget("composed prompt, uncached", cold, UNCACHED_MS,
                       f"{rows}, prompt files on disk, every process cache emptied first"),
        against_budget("composed prompt, uncached, files not yet rendered", fresh, UNCACHED_MS,
                       "USER.md and MEMORY.md moved aside, so the compose renders them from the rows (an agent's "
                       "first compose)"),
    ]


def _with_files_aside(measure):
    """`measure()` with USER.md and MEMORY.md of `main` moved aside, put back afterwards."""
    from resources.files import resource_file_path

    paths = [resource_file_path(agent_id=MAIN_AGENT, resource_type=t) for t in PROMPT_FILES]
    aside = [path.with_suffix(".bench-aside") for path in paths]
    for path, moved in zip(paths, aside, strict=True):
        path.rename(moved)
    try:
        return measure()
    finally:
        for path, moved in zip(paths, aside, strict=True):
            moved.rename(path)


def measure_rebuild(data, repeat: int) -> list[Figure]:
    """`prompt_files_rebuild` after the newest identity row changed (a new USER.md revision and file), and
    with nothing changed."""
    from django.db import connection

    from memory.models import Memory
    from memory.prompt_files import prompt_files_rebuild
    from memory.rows import memory_upsert

    newest = Memory.objects.filter(agent_id=MAIN_AGENT, owner_id=MAIN_OWNER, category="identity", scope_type="owner",
                                   archived_at__isnull=True).order_by("-updated_at", "-id").first()
    counter = itertools.count()

    def change():  # a new fact on top of USER.md, as after a review
        memory_upsert(agent_id=MAIN_AGENT, owner_id=MAIN_OWNER, scope_type="owner", scope_id=newest.scope_id,
                      key=newest.key, value=f"works on benchmark number {next(counter)}", category="identity",
                      actor_type="system")

    def rebuild():
        prompt_files_rebuild(agent_id=MAIN_AGENT, trigger="bench")

    changed, unchanged = Stopwatch(), Stopwatch()
    rebuild()
    for _ in range(repeat):
        change()
        with changed:
            rebuild()
        with unchanged:
            rebuild()
    connection.close()
    rows = f"{data.main_owner_rows:,} rows for the owner"
    return [
        against_budget("prompt-file rebuild, a row changed (new USER.md revision and file)", changed, REBUILD_MS,
                       f"{rows}; the file and its folder fsynced"),
        against_budget("prompt-file rebuild, nothing changed", unchanged, REBUILD_MS, rows),
    ]
