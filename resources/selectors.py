"""Reads of versioned resources, for the commands, the API and the admin."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Exists, OuterRef, Subquery

from resources.catalog import check_agent, check_scope, check_type
from resources.errors import UnknownResource, UnknownRevision
from resources.models import GLOBAL_SCOPE, Resource, ResourceRevision, ResourceType


@dataclass(frozen=True)
class ResourceSummary:
    resource: Resource
    current: ResourceRevision | None  # without its content


def _type_order(resource_type: str) -> int:
    return ResourceType.values.index(resource_type) if resource_type in ResourceType.values else 99


def resource_list(*, agent_id: str) -> list[ResourceSummary]:
    """Every resource of the agent with its current revision: files in a fixed order, then checkpoints."""
    check_agent(agent_id)
    resources = list(Resource.objects.filter(agent_id=agent_id))
    is_current = Resource.objects.filter(
        agent_id=OuterRef("agent_id"), resource_type=OuterRef("resource_type"), scope_id=OuterRef("scope_id"),
        current_revision=OuterRef("revision"),
    )
    rows = ResourceRevision.objects.filter(Exists(is_current), agent_id=agent_id).defer("content")
    current = {(r.resource_type, r.scope_id): r for r in rows}
    summaries = [ResourceSummary(r, current.get((r.resource_type, r.scope_id))) for r in resources]
    return sorted(summaries, key=lambda s: (_type_order(s.resource.resource_type), s.resource.scope_id))


def resource_agents() -> list[str]:
    """The agents that have resources (every installed agent has its bootstrap files), in id order."""
    return list(Resource.objects.order_by("agent_id").values_list("agent_id", flat=True).distinct())


def resource_get(*, agent_id: str, resource_type: str, scope_id: str | None = GLOBAL_SCOPE) -> Resource:
    check_agent(agent_id)
    check_type(resource_type)
    scope_id = check_scope(resource_type, scope_id)
    resource = Resource.objects.filter(agent_id=agent_id, resource_type=resource_type, scope_id=scope_id).first()
    if resource is None or not resource.current_revision:
        where = "" if scope_id == GLOBAL_SCOPE else f" in scope {scope_id}"
        raise UnknownResource(f"{resource_type} has no revisions for agent {agent_id}{where}")
    return resource


def revision_of(*, agent_id: str, resource_type: str, scope_id: str, number: int) -> ResourceRevision | None:
    """One revision by its number, with its content, or None: the one lookup of a revision."""
    return ResourceRevision.objects.filter(agent_id=agent_id, resource_type=resource_type, scope_id=scope_id,
                                           revision=number).first()


def resource_revision_get(
    *, agent_id: str, resource_type: str, revision: int | None = None, scope_id: str | None = GLOBAL_SCOPE
) -> ResourceRevision:
    """One revision with its content; the current one when `revision` is None."""
    resource = resource_get(agent_id=agent_id, resource_type=resource_type, scope_id=scope_id)
    number = resource.current_revision if revision is None else revision
    found = revision_of(agent_id=agent_id, resource_type=resource_type, scope_id=resource.scope_id, number=number)
    if found is None:
        raise UnknownRevision(f"{resource_type} has no revision {number} for agent {agent_id} "
                              f"(the latest is {resource.current_revision})")
    return found


def resource_revision_list(
    *, agent_id: str, resource_type: str, scope_id: str | None = GLOBAL_SCOPE, limit: int | None = None
) -> list[ResourceRevision]:
    """Revisions newest first, without their content."""
    resource = resource_get(agent_id=agent_id, resource_type=resource_type, scope_id=scope_id)
    rows = ResourceRevision.objects.filter(
        agent_id=agent_id, resource_type=resource_type, scope_id=resource.scope_id
    ).defer("content").order_by("-revision")
    return list(rows[:limit] if limit else rows)


def resource_scopes(*, agent_id: str, resource_type: str = ResourceType.CHECKPOINT) -> list[str]:
    """The scopes a type has for the agent (the conversations with checkpoints)."""
    check_agent(agent_id)
    return list(Resource.objects.filter(agent_id=agent_id, resource_type=resource_type)
                .order_by("scope_id").values_list("scope_id", flat=True))


def resource_current_hashes(*, agent_id: str, types) -> dict[str, tuple[int, str]]:
    """resource type -> (current revision number, its content hash), for the global-scope types given."""
    types = list(types)
    if not types:
        return {}
    current = ResourceRevision.objects.filter(agent_id=OuterRef("agent_id"), resource_type=OuterRef("resource_type"),
                                              scope_id=OuterRef("scope_id"), revision=OuterRef("current_revision"))
    rows = (Resource.objects.filter(agent_id=agent_id, scope_id=GLOBAL_SCOPE, resource_type__in=types)
            .annotate(current_hash=Subquery(current.values("content_hash")[:1]))
            .filter(current_hash__isnull=False).values_list("resource_type", "current_revision", "current_hash"))
    return {t: (n, h) for t, n, h in rows}


def resource_current_revisions(*, agent_id: str, types) -> dict[str, ResourceRevision]:
    """resource type -> its current revision with its content, for the global-scope types given, in one
    query: what every prompt is composed from."""
    types = list(types)
    if not types:
        return {}
    is_current = Resource.objects.filter(agent_id=agent_id, scope_id=GLOBAL_SCOPE,
                                         resource_type=OuterRef("resource_type"), current_revision=OuterRef("revision"))
    rows = ResourceRevision.objects.filter(Exists(is_current), agent_id=agent_id, scope_id=GLOBAL_SCOPE,
                                           resource_type__in=types)
    return {row.resource_type: row for row in rows}
