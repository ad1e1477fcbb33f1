"""Versioned resources: list, history, one revision, diff, rollback; SOUL.md proposals."""

from __future__ import annotations

from ninja import Field, Query, Router, Schema, Status

from api import schemas as s
from memory.soul_drafts import soul_propose
from resources.diff import revision_diff
from resources.selectors import resource_list, resource_revision_get, resource_revision_list
from resources.services import resource_rollback
from resources.soul import soul_apply, soul_deny

router = Router(tags=["resources"])
RESOURCE = "/agents/{agent}/resources/{resource_type}"


def revision_out(revision, *, content: bool = False) -> dict:
    data = {"resource_type": revision.resource_type, "scope_id": revision.scope_id, "revision": revision.revision,
            "parent_revision": revision.parent_revision, "content_hash": revision.content_hash,
            "byte_size": revision.byte_size, "mutation_source": revision.mutation_source,
            "provenance": revision.provenance or {}, "created_at": revision.created_at}
    if content:
        data["content"] = revision.content
    return data


@router.get("/agents/{agent}/resources", response=s.ResourceListOut,
            summary="List resources with their current revision")
def resources(request, agent: str):
    """Every resource of the agent with its current revision (checkpoints last, one per conversation)."""
    return {"resources": [
        {"resource_type": x.resource.resource_type, "scope_id": x.resource.scope_id,
         "current_revision": x.resource.current_revision, "updated_at": x.resource.updated_at,
         "current": revision_out(x.current) if x.current else None}
        for x in resource_list(agent_id=agent)
    ]}


class HistoryQuery(Schema):
    scope: s.ScopeText | None = None
    limit: int | None = Field(None, ge=1, le=1000)


@router.get(RESOURCE + "/revisions", response=s.RevisionListOut, summary="List a resource's revisions")
def revisions(request, agent: str, resource_type: str, query: Query[HistoryQuery]):
    """Revisions newest first, without their content."""
    rows = resource_revision_list(agent_id=agent, resource_type=resource_type, scope_id=query.scope,
                                  limit=query.limit)
    scope = rows[0].scope_id if rows else (query.scope or "global")
    return {"resource_type": resource_type, "scope_id": scope, "revisions": [revision_out(r) for r in rows]}


class ScopeQuery(Schema):
    scope: s.ScopeText | None = None


@router.get(RESOURCE + "/revisions/{revision}", response=s.RevisionContentOut,
            summary="Get one revision with its content")
def revision(request, agent: str, resource_type: str, revision: int, query: Query[ScopeQuery]):
    """One revision with its content."""
    found = resource_revision_get(agent_id=agent, resource_type=resource_type, revision=revision,
                                  scope_id=query.scope)
    return revision_out(found, content=True)


class DiffQuery(Schema):
    a: int = Field(..., ge=1, le=s.MAX_INT)
    b: int = Field(..., ge=1, le=s.MAX_INT)
    context: int = Field(3, ge=0, le=1000)
    scope: s.ScopeText | None = None


@router.get(RESOURCE + "/diff", response=s.DiffOut, summary="Diff two revisions")
def diff(request, agent: str, resource_type: str, query: Query[DiffQuery]):
    """Unified diff from revision `a` to revision `b` ("" when equal)."""
    rev_a, rev_b = (resource_revision_get(agent_id=agent, resource_type=resource_type, revision=n,
                                          scope_id=query.scope) for n in (query.a, query.b))
    return {"resource_type": resource_type, "scope_id": rev_a.scope_id, "a": query.a, "b": query.b,
            "diff": revision_diff(rev_a, rev_b, context=query.context)}


@router.post(RESOURCE + "/rollback", response=s.RollbackOut, summary="Roll a resource back to a revision")
def rollback(request, agent: str, resource_type: str, payload: s.RollbackIn):
    """Make an earlier revision current again as a new `rollback` revision (operator key).

    Checkpoints cannot be rolled back (409).
    """
    request.auth.require_operator("a rollback")
    result = resource_rollback(agent_id=agent, resource_type=resource_type, revision=payload.revision,
                               provenance={"via": "api", "actor": request.auth.actor})
    return {"status": "already_at_target" if result.already_at_target else "rolled_back",
            "resource_type": resource_type, "from_revision": result.from_revision,
            "target_revision": payload.revision,
            "revision": result.revision.revision if result.revision else None, "caveat": result.caveat}


@router.post("/agents/{agent}/soul/proposals", response={201: s.SoulProposalOut}, tags=["soul"],
             summary="Propose a SOUL.md change")
def soul_proposal(request, agent: str, payload: s.SoulProposalIn):
    """`/soul …`: propose a SOUL.md change (operator trust); apply or deny it by its token."""
    trust = request.auth.require_operator_trust(payload.trust, "/soul")
    proposal = soul_propose(agent_id=agent, mode=payload.mode, trust=trust, revision=payload.revision,
                            instruction=payload.instruction, requested_by=request.auth.actor)
    return Status(201, {"token": proposal.token, "mode": proposal.mode, "status": proposal.status,
                        "diff": proposal.diff, "rationale": proposal.rationale, "expires_at": proposal.expires_at})


@router.post("/agents/{agent}/soul/proposals/{token}/apply", response=s.SoulDecisionOut, tags=["soul"],
             summary="Apply a SOUL.md proposal")
def soul_proposal_apply(request, agent: str, token: str, payload: s.SoulDecisionIn | None = None):
    """Write the proposal's SOUL.md (operator trust); a stale base or a decided proposal is a 409."""
    trust = request.auth.require_operator_trust(payload.trust if payload else None, "/soul apply")
    applied = soul_apply(agent_id=agent, token=token, trust=trust)
    return {"token": token, "mode": applied.proposal.mode, "status": applied.proposal.status,
            "revision": applied.revision}


@router.post("/agents/{agent}/soul/proposals/{token}/deny", response=s.SoulDecisionOut, tags=["soul"],
             summary="Deny a SOUL.md proposal")
def soul_proposal_deny(request, agent: str, token: str, payload: s.SoulDecisionIn | None = None):
    """Drop the proposal without writing anything (operator trust)."""
    trust = request.auth.require_operator_trust(payload.trust if payload else None, "/soul deny")
    proposal = soul_deny(agent_id=agent, token=token, trust=trust)
    return {"token": token, "mode": proposal.mode, "status": proposal.status, "revision": None}
