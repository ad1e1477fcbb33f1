"""USER.md and MEMORY.md, rendered from the agent owner's promoted memory rows.

Rendering is a pure function of the rows: sections in a fixed order, newest row first, per-section
row caps, values cut at 200 characters, then the file's token budget (bytes / 4). The same rows give
the same bytes, so the content hash only changes when the facts do. Every row left out is counted
with its reason and logged; nothing is dropped silently.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import DatabaseError
from django.db.models import QuerySet

from fermix_site import generations
from fermix_site.conf import conf
from memory import queries
from memory.models import Category, Memory, PromoteTarget, ScopeType, memories_generation
from resources import files
from resources.catalog import content_hash
from resources.selectors import resource_current_hashes
from resources.services import resource_write_file

logger = logging.getLogger("fermix.memory")

VALUE_LIMIT = 200
ELLIPSIS = "…"
NOT_REBUILT = "prompt_files_not_rebuilt"  # the warning a committed change carries when the rebuild failed

_render_cache = generations.local_cache(max_entries=512)


@dataclass(frozen=True)
class Section:
    """One section of a prompt file: the live rows of the agent's owner with this category, at one of
    these scope types, newest first, at most `cap` of them."""

    file: str
    heading: str
    category: str
    cap: int
    scopes: tuple[str, ...]


OWNER, AGENT, CONVERSATION = ScopeType.OWNER, ScopeType.AGENT, ScopeType.CONVERSATION
# The rendering rule, the one place it is written: which rows render into which file, in what order and
# how many. USER.md holds the user's profile at owner (or conversation) scope; MEMORY.md the directives
# at agent or owner scope (a rule stated in one conversation is no standing rule) and the context at
# any of the three. Job-scoped rows, conversation notes (no category) and other owners' rows never render.
SECTIONS = (
    Section("user_md", "Identity", Category.IDENTITY, 6, (OWNER, CONVERSATION)),
    Section("user_md", "Preferences", Category.PREFERENCE, 6, (OWNER, CONVERSATION)),
    Section("user_md", "Interests", Category.INTEREST, 6, (OWNER, CONVERSATION)),
    Section("user_md", "Goals", Category.GOAL, 5, (OWNER, CONVERSATION)),
    Section("memory_md", "Working Rules", Category.DIRECTIVE, 8, (AGENT, OWNER)),
    Section("memory_md", "Context", Category.CONTEXT, 12, (AGENT, OWNER, CONVERSATION)),
)
FILE_NAMES = {"user_md": "USER.md", "memory_md": "MEMORY.md"}
FILES = {file: tuple(s for s in SECTIONS if s.file == file) for file in FILE_NAMES}
SECTION_OF = {section.category: section for section in SECTIONS}
RENDERED_SCOPES = {scope for section in SECTIONS for scope in section.scopes}


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / 4)


def token_cap(resource_type: str) -> int:
    memory = conf.memory
    return memory.prompt_user_token_cap if resource_type == "user_md" else memory.prompt_memory_token_cap


@dataclass
class Rendered:
    resource_type: str
    content: str
    tokens: int
    cap: int
    shown: dict[int, str] = field(default_factory=dict)  # row id -> section heading
    over_budget: list[int] = field(default_factory=list)  # ids of rows left out by the token budget
    loaded_over_cap: int = 0  # rows given to `render` that their section's row cap left out
    count_unloaded: Callable[[], int] | None = field(default=None, repr=False, compare=False)
    _over_cap: int | None = field(default=None, repr=False, compare=False)

    @property
    def file_name(self) -> str:
        return FILE_NAMES[self.resource_type]

    @property
    def over_cap(self) -> int:
        """Rows left out by their section's row cap. Those never loaded are counted on first use, so a
        render only for its content or size costs no count (the value is the same either way)."""
        if self._over_cap is None:
            unloaded = self.count_unloaded() if self.count_unloaded is not None else 0
            self._over_cap = self.loaded_over_cap + unloaded
        return self._over_cap


def line_for(value: str) -> str:
    if len(value) > VALUE_LIMIT:
        value = value[:VALUE_LIMIT] + ELLIPSIS
    return "- " + " ".join(value.split())  # one line per row, whatever the value holds


def _join(sections: dict[str, list[str]]) -> str:
    blocks = [f"## {heading}\n" + "".join(line + "\n" for line in lines) for heading, lines in sections.items()
              if lines]
    return "\n".join(blocks)


def render(resource_type: str, rows: list[Memory], budget: int, *, over_cap: int = 0,
           count_unloaded: Callable[[], int] | None = None) -> Rendered:
    """Render one file from candidate rows (any order): caps first, then the token budget.

    `over_cap` counts rows the caller already left out by the caps without loading them, or
    `count_unloaded` counts them when `over_cap` is first read.
    """
    result = Rendered(resource_type, "", 0, budget, loaded_over_cap=over_cap, count_unloaded=count_unloaded)
    ordered = sorted(rows, key=lambda r: (r.updated_at, r.id), reverse=True)
    chosen: dict[str, list[str]] = {s.heading: [] for s in FILES[resource_type]}
    for section in FILES[resource_type]:
        in_section = [r for r in ordered if r.category == section.category]
        result.loaded_over_cap += len(in_section[section.cap:])
        for row in in_section[: section.cap]:
            line = line_for(row.value)
            chosen[section.heading].append(line)
            if estimate_tokens(_join(chosen)) <= budget:
                result.shown[row.id] = section.heading
            else:
                chosen[section.heading].pop()
                result.over_budget.append(row.id)
    result.content = _join(chosen)
    result.tokens = estimate_tokens(result.content)
    return result


def section_rows(agent_id: str, section: Section) -> QuerySet[Memory]:
    """The rows that may render into `section`, newest first (the partial index `memories_render_idx`
    answers one category and its scope types, both for the newest rows and for the count of the rest)."""
    rows = Memory.objects.filter(agent_id=agent_id, owner_id=conf.memory.owner_id, archived_at__isnull=True,
                                 category=section.category, scope_type__in=section.scopes)
    return rows.order_by("-updated_at", "-id")


def _cache_key(agent_id: str, resource_type: str) -> tuple:
    return (agent_id, resource_type, conf.memory.owner_id, token_cap(resource_type))


def render_for_agent(agent_id: str, resource_type: str) -> Rendered:
    """The file as the agent owner's rows render it now. Cached per process against the agent's
    `memories:` generation: a review renders both files for the model, then again to rebuild them,
    and composes and the console render them too. Treat the result as read-only."""
    return _render_cache.read_through(_cache_key(agent_id, resource_type), [memories_generation(agent_id)],
                                      lambda: _render_from_rows(agent_id, resource_type))


@dataclass
class RenderedFiles:
    """Both files as rendered at one `memories:` generation (read before their rows, as the cache does)."""

    agent_id: str
    generation: int
    files: dict[str, Rendered]
    keys: dict[str, tuple]


def render_files(agent_id: str) -> RenderedFiles:
    """Both files as `render_for_agent` gives them (through the same cache), with their generation."""
    generation = generations.current([memories_generation(agent_id)])
    files, keys = {}, {}
    for resource_type in FILES:
        keys[resource_type] = key = _cache_key(agent_id, resource_type)
        files[resource_type] = _render_cache.read_at(key, generation,
                                                     lambda t=resource_type: _render_from_rows(agent_id, t))
    return RenderedFiles(agent_id, generation[0], files, keys)


def carry_forward(rendered: RenderedFiles, *, writes: int, changed) -> None:
    """After `writes` committed changes of our own to the agent's rows (each bumps the generation once),
    none of which can appear in a file outside `changed` (see `files_rendering`): those files render as
    they did, so they are cached again at the generation our changes leave. If anyone else changed a row
    since `rendered` was read, the generation is past that one and the next render reads the rows."""
    at = (rendered.generation + writes,)
    for resource_type, value in rendered.files.items():
        if resource_type not in changed:
            _render_cache.put(rendered.keys[resource_type], at, value)


def files_rendering(memory: Memory, *categories: str) -> set[str]:
    """The files this row can render into, by owner and the scope rules, under its category and any of
    `categories` (what it was before a change), archived or not: a change to the row can change no other
    file. Rows of other owners render nowhere."""
    if memory.owner_id != conf.memory.owner_id:
        return set()
    sections = (SECTION_OF.get(category) for category in {memory.category, *categories})
    return {section.file for section in sections if section and memory.scope_type in section.scopes}


def _render_from_rows(agent_id: str, resource_type: str, count_rest: bool = True) -> Rendered:
    """Load only each section's newest `cap` rows, then render. The rest of the full sections is counted
    when `over_cap` is first read (the rebuild reads it); `count_rest=False` never counts it."""
    sections = FILES[resource_type]
    rows = queries.file_rows(agent_id, conf.memory.owner_id, sections)
    loaded = Counter(row.category for row in rows)
    full = [section for section in sections if loaded[section.category] == section.cap]

    def count_unloaded() -> int:
        return sum(section_rows(agent_id, section).count() - section.cap for section in full)

    counted = count_unloaded if full and count_rest else None
    return render(resource_type, rows, token_cap(resource_type), count_unloaded=counted)


def scope_reason(memory: Memory) -> str | None:
    """Why the rendering rule (SECTIONS) keeps this row out of the prompt files, or None when it allows it."""
    if memory.archived_at is not None:
        return "archived"
    if memory.owner_id != conf.memory.owner_id:
        return f"belongs to owner {memory.owner_id!r}, not the agent's owner {conf.memory.owner_id!r}"
    if not memory.category:
        return "a conversation note (no category) never renders"
    if memory.scope_type not in RENDERED_SCOPES:
        return f"{memory.scope_type}-scoped rows never render"
    section = SECTION_OF[memory.category]
    if memory.scope_type not in section.scopes:
        return (f"{memory.scope_type}-scoped {memory.category} rows never render ({memory.category} rows render "
                f"at {' or '.join(section.scopes)} scope)")
    return None


def promote_target_for(category: str) -> str:
    """The file a row of this category renders into when the rule allows it (the row's `promote_target`)."""
    section = SECTION_OF.get(category)
    return section.file if section else PromoteTarget.NONE


def placement(memory: Memory, renders: dict | None = None) -> tuple[str, str]:
    """("USER.md › Identity", "") when the row renders, else ("", why not): the rendering rule, its
    section's row cap or the file's token budget. `renders` caches one render per (agent, file), so the
    console's page of rows costs two renders; they skip counting the rows over the caps."""
    reason = scope_reason(memory)
    if reason:
        return "", reason
    resource_type = promote_target_for(memory.category) or "memory_md"
    if renders is None:
        rendered = render_for_agent(memory.agent_id, resource_type)
    else:
        key = (memory.agent_id, resource_type)
        if key not in renders:
            renders[key] = _render_from_rows(memory.agent_id, resource_type, count_rest=False)
        rendered = renders[key]
    if memory.id in rendered.shown:
        return f"{rendered.file_name} › {rendered.shown[memory.id]}", ""
    if memory.id in rendered.over_budget:
        return "", f"over {rendered.file_name}'s token budget ({rendered.cap} tokens)"
    return "", "over its section's row cap (newer rows are kept)"


def why_not_rendered(memory: Memory) -> str | None:
    """None when the row renders, else the reason it does not: the rendering rule, row cap or token budget."""
    return placement(memory)[1] or None


def prompt_files_rebuild(
    *, agent_id: str, mutation_source: str = "extraction_rebuild", trigger: str = "", memory_ids=(),
    extra_provenance: dict | None = None,
) -> dict[str, Rendered]:
    """Render USER.md and MEMORY.md and write each whose content changed, as a revision."""
    results = {}
    current = resource_current_hashes(agent_id=agent_id, types=list(FILES))  # neither write changes the other
    for resource_type in FILES:
        rendered = render_for_agent(agent_id, resource_type)
        results[resource_type] = rendered
        if _already_written(agent_id, resource_type, rendered.content, current.get(resource_type)):
            continue
        # Counted only for a write: the rows over the caps are a second statement over full sections.
        if rendered.over_cap or rendered.over_budget:
            logger.info("%s/%s: rows left out: %d over the section caps, %d over the %d-token budget",
                        agent_id, rendered.file_name, rendered.over_cap, len(rendered.over_budget), rendered.cap)
        provenance = {
            "trigger": trigger,
            "memory_ids": sorted(int(i) for i in memory_ids),
            "rows_shown": len(rendered.shown),
            "rows_over_cap": rendered.over_cap,
            "rows_over_budget": rendered.over_budget,
            "tokens": rendered.tokens,
            **(extra_provenance or {}),
        }
        resource_write_file(agent_id=agent_id, resource_type=resource_type, content=rendered.content,
                            mutation_source=mutation_source, provenance=provenance)
    return results


@dataclass(frozen=True)
class Rebuild:
    """What a rebuild after a committed change did: the files as rendered, or the fault that stopped it."""

    files: dict[str, Rendered] = field(default_factory=dict)  # empty when not rebuilt
    error: str = ""

    @property
    def warnings(self) -> list[str]:
        return [NOT_REBUILT] if self.error else []

    def shown_in(self, memory_id: int) -> list[str]:
        """The files that show the row now (none when they were not rebuilt)."""
        return [r.file_name for r in self.files.values() if memory_id in r.shown]


def prompt_files_rebuild_after_commit(
    *, agent_id: str, trigger: str, memory_ids=(), extra_provenance: dict | None = None,
) -> Rebuild:
    """Rebuild the prompt files after rows were committed; a storage fault is returned, not raised.

    The rows are the change the caller asked for and are already durable: a full disk (or a database
    that refuses the revision) must neither undo them nor have them reported as failed. Each file is
    written whole or not at all, and the next rebuild (any memory change, or the hourly schedule)
    writes what this one could not.
    """
    try:
        return Rebuild(prompt_files_rebuild(agent_id=agent_id, trigger=trigger, memory_ids=memory_ids,
                                            extra_provenance=extra_provenance))
    except (OSError, DatabaseError) as exc:
        logger.error("%s: prompt files not rebuilt after %s: %s", agent_id, trigger or "a change", exc)
        return Rebuild(error=f"{type(exc).__name__}: {exc}")


def _already_written(agent_id: str, resource_type: str, content: str, current: tuple[int, str] | None) -> bool:
    """True when the file on disk and its current revision both hold `content`: there is nothing to
    write and no hand edit to record, so the write lock is not taken. Most rebuilds change one file of
    the two. Checked without the lock: a write landing meanwhile is as if it came just after us."""
    data = content.encode("utf-8")
    if files.read_bytes(files.resource_file_path(agent_id=agent_id, resource_type=resource_type)) != data:
        return False
    return current is not None and current[1] == content_hash(content)
