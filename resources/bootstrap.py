"""The bootstrap prompt files: shipped templates, seeding on install, loading for every prompt, drift.

IDENTITY.md, FERMIX.md, SOUL.md and REALTIME.md live in `$FERMIX_HOME/bootstrap/<agent_id>/`. The
operator may edit them by hand; loading them records such edits as revisions (`manual_edit`, or
`imported` for a file the registry has never seen), so every version stays in the history.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

from resources import files
from resources.catalog import BOOTSTRAP_FILES, check_agent, content_hash
from resources.models import GLOBAL_SCOPE, MutationSource, ResourceRevision, ResourceType
from resources.selectors import resource_current_hashes
from resources.services import resource_capture_file, resource_seed_file

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


def bootstrap_load(*, agent_id: str, types: tuple[str, ...] = BOOTSTRAP_TYPES) -> dict[str, BootstrapFile]:
    """Read the agent's bootstrap files for a prompt, in the order given; missing files are left out.

    Costs two small queries when nothing changed. A file with no record is captured as `imported`,
    a file whose bytes differ from its current revision as `manual_edit`.
    """
    check_agent(agent_id)
    on_disk = {}
    for resource_type in types:
        data = files.read_bytes(files.resource_file_path(agent_id=agent_id, resource_type=resource_type))
        if data is not None:
            on_disk[resource_type] = files.decode(data)
    known = resource_current_hashes(agent_id=agent_id, types=list(on_disk))
    loaded = {}
    for resource_type, content in on_disk.items():
        number, digest = known.get(resource_type, (None, None))
        if digest != content_hash(content):
            captured = resource_capture_file(agent_id=agent_id, resource_type=resource_type, why="bootstrap_load")
            number = captured.revision if captured else number
            content = captured.content if captured else content
        loaded[resource_type] = BootstrapFile(resource_type, BOOTSTRAP_FILES[resource_type], content, number)
    return loaded


# --- template drift (doctor) ------------------------------------------------------------------------


@dataclass(frozen=True)
class TemplateCheck:
    drifted: list[str]  # seeded from a template that has changed since
    untracked: list[str]  # no seed revision: seeded before revision tracking, or written by hand
    missing: list[str]  # not on disk
    current: list[str]  # seeded from the template that ships now


def bootstrap_template_check(*, agent_id: str, template_dir: Path | None = None) -> TemplateCheck:
    """Compare the shipped FERMIX.md, SOUL.md and REALTIME.md with what their seed revision recorded."""
    check_agent(agent_id)
    result = TemplateCheck([], [], [], [])
    for resource_type in DRIFT_CHECKED:
        name = BOOTSTRAP_FILES[resource_type]
        path = files.resource_file_path(agent_id=agent_id, resource_type=resource_type)
        seed = (ResourceRevision.objects.filter(agent_id=agent_id, resource_type=resource_type,
                                                scope_id=GLOBAL_SCOPE, mutation_source=MutationSource.SEED)
                .order_by("-revision").only("content_hash").first())
        if not path.exists():
            result.missing.append(name)
        elif seed is None:
            result.untracked.append(name)
        elif seed.content_hash != content_hash(bootstrap_template(resource_type, template_dir=template_dir)):
            result.drifted.append(name)
        else:
            result.current.append(name)
    return result
