"""The bootstrap prompt files: shipped templates, seeding on install, loading for every prompt, drift.

IDENTITY.md, FERMIX.md, SOUL.md and REALTIME.md are resources: their current revisions are what every
prompt holds, and `$FERMIX_HOME/bootstrap/<agent_id>/` holds each node's mirror of them. The operator
may edit a mirror by hand on any node; loading records such an edit as a revision (`manual_edit`, or
`imported` for a file the registry has never seen) first, so every version stays in the history.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

from resources import files
from resources.catalog import BOOTSTRAP_FILES, check_agent, content_hash
from resources.models import GLOBAL_SCOPE, MutationSource, Resource, ResourceRevision, ResourceType
from resources.selectors import resource_current_revisions
from resources.services import resource_seed_file, resource_sync_changed

TEMPLATE_DIR = Path(__file__).resolve().parent / "bootstrap_templates"
DEFAULT_AGENT_NAME = "Fermix"
BOOTSTRAP_TYPES = tuple(BOOTSTRAP_FILES)
# IDENTITY.md embeds the agent name, so comparing renders cannot tell template drift from a rename.
DRIFT_CHECKED = (ResourceType.FERMIX_MD, ResourceType.SOUL_MD, ResourceType.REALTIME_MD)


def bootstrap_template(resource_type: str, *, agent_name: str = DEFAULT_AGENT_NAME,
                       template_dir: Path | None = None) -> str:
    """The shipped template of a bootstrap file, rendered (only IDENTITY.md has a placeholder)."""
    text = ((template_dir or TEMPLATE_DIR) / BOOTSTRAP_FILES[resource_type]).read_text(encoding="utf-8")
    if resource_type == ResourceType.IDENTITY_MD:
        text = string.Template(text).safe_substitute(agent_name=agent_name)
    return text


# --- seeding ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeedResult:
    resource_type: str
    path: Path
    seeded: bool  # False: the file existed and was kept
    revision: int | None


def bootstrap_seed(*, agent_id: str, agent_name: str = DEFAULT_AGENT_NAME,
                   template_dir: Path | None = None) -> list[SeedResult]:
    """Write each bootstrap file that does not exist yet from its template, as a `seed` revision."""
    check_agent(agent_id)
    results = []
    for resource_type in BOOTSTRAP_TYPES:
        content = bootstrap_template(resource_type, agent_name=agent_name, template_dir=template_dir)
        provenance = {"template": BOOTSTRAP_FILES[resource_type], "template_hash": content_hash(content)}
        if resource_type == ResourceType.IDENTITY_MD:
            provenance["agent_name"] = agent_name
        seeded, revision = resource_seed_file(
            agent_id=agent_id, resource_type=resource_type, content=content, provenance=provenance
        )
        path = files.resource_file_path(agent_id=agent_id, resource_type=resource_type)
        results.append(SeedResult(resource_type, path, seeded, revision.revision if revision else None))
    return results


# --- loading for the prompt -------------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapFile:
    resource_type: str
    name: str
    content: str
    revision: int | None  # the revision that now matches the file


def bootstrap_load(*, agent_id: str, types: tuple[str, ...] = BOOTSTRAP_TYPES,
                   why: str = "bootstrap_load") -> dict[str, BootstrapFile]:
    """The agent's bootstrap files for a prompt, from their current revisions, in the order given; a
    file with no revision is left out.

    This node's hand edits are recorded first (a stat per file finds them; see `resources.mirrors`),
    so an edit is in the prompt it was made for. Costs one query when nothing changed.
    """
    check_agent(agent_id)
    resource_sync_changed(agent_id=agent_id, why=why)
    current = resource_current_revisions(agent_id=agent_id, types=types)
    return {t: BootstrapFile(t, BOOTSTRAP_FILES[t], current[t].content, current[t].revision)
            for t in types if t in current}


# --- template drift (doctor) ------------------------------------------------------------------------


@dataclass(frozen=True)
class TemplateCheck:
    drifted: list[str]  # seeded from a template that has changed since
    untracked: list[str]  # no seed revision: seeded before revision tracking, or written by hand
    missing: list[str]  # no revision, and no file on this node
    current: list[str]  # seeded from the template that ships now


def bootstrap_template_check(*, agent_id: str, template_dir: Path | None = None) -> TemplateCheck:
    """Compare the shipped FERMIX.md, SOUL.md and REALTIME.md with what their seed revision recorded."""
    check_agent(agent_id)
    result = TemplateCheck([], [], [], [])
    for resource_type in DRIFT_CHECKED:
        name = BOOTSTRAP_FILES[resource_type]
        recorded = Resource.objects.filter(agent_id=agent_id, resource_type=resource_type, scope_id=GLOBAL_SCOPE,
                                           current_revision__gt=0).exists()
        seed = (ResourceRevision.objects.filter(agent_id=agent_id, resource_type=resource_type,
                                                scope_id=GLOBAL_SCOPE, mutation_source=MutationSource.SEED)
                .order_by("-revision").only("content_hash").first())
        if not recorded and not files.resource_file_path(agent_id=agent_id, resource_type=resource_type).exists():
            result.missing.append(name)
        elif seed is None:
            result.untracked.append(name)
        elif seed.content_hash != content_hash(bootstrap_template(resource_type, template_dir=template_dir)):
            result.drifted.append(name)
        else:
            result.current.append(name)
    return result
