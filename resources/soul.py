"""SOUL.md curation: the owner asks for a change, sees the diff, then applies or denies it by token.

`revert N` restores revision N, `reset` restores the shipped template; both are recorded as
`rollback`. `review` and `suggest` carry a model-written draft (see `resources.soul_drafts`) and are
recorded as `soul_curation`. A curation draft was written against the SOUL.md it was shown, so it
applies only while SOUL.md still has that hash (stale base otherwise); a revert or reset names its
content outright and applies over whatever is there. Every applied change bumps the prompt
generation, so every process drops its cached composed prompt.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from resources.bootstrap import bootstrap_template
from resources.catalog import check_agent, check_content, content_hash
from resources.diff import unified_diff
from resources.errors import (
    Forbidden,
    NoChange,
    ProposalClosed,
    ProposalExpired,
    StaleBase,
    UnknownProposal,
    UnsupportedMode,
)
from resources.models import MutationSource, Resource, ResourceType, SoulProposal
from resources.selectors import resource_current_revisions, resource_revision_get
from resources.services import RollbackResult, resource_file_locked, resource_sync_changed

PROPOSAL_TTL = timedelta(seconds=300)
# Letters and digits only: a token never starts with "-" (a command line would read it as an option).
TOKEN_ALPHABET = string.ascii_letters + string.digits
TOKEN_LENGTH = 24  # about 143 random bits
OWNER_TRUST = "operator"
Mode = SoulProposal.Mode
Status = SoulProposal.Status
CURATION_MODES = (Mode.REVIEW, Mode.SUGGEST)
SOUL = ResourceType.SOUL_MD


def require_owner(trust: str) -> None:
    if trust != OWNER_TRUST:
        raise Forbidden("only the owner (operator trust) can change SOUL.md")


def soul_current(agent_id: str) -> tuple[str, str]:
    """(content, sha256) of SOUL.md's current revision, after recording a hand edit of this node's
    mirror; ("", "") when SOUL.md has no revision."""
    resource_sync_changed(agent_id=agent_id, why="soul")
    current = resource_current_revisions(agent_id=agent_id, types=[SOUL]).get(SOUL)
    return ("", "") if current is None else (current.content, current.content_hash)


def _proposed(agent_id: str, mode: str, revision: int | None, draft: str | None) -> tuple[str, str]:
    """The content a proposal would write, and a label for it in the diff."""
    if mode == Mode.REVERT:
        if revision is None:
            raise UnsupportedMode("revert needs the revision number to restore")
        target = resource_revision_get(agent_id=agent_id, resource_type=SOUL, revision=revision)
        return target.content, f"SOUL.md r{target.revision}"
    if mode == Mode.RESET:
        return bootstrap_template(SOUL), "SOUL.md (shipped template)"
    if mode in CURATION_MODES:
        return check_content(draft), f"SOUL.md ({mode} draft)"
    raise UnsupportedMode(f"unknown mode {mode!r}; use one of: {', '.join(Mode.values)}")


def soul_propose(
    *,
    agent_id: str,
    mode: str,
    trust: str,
    revision: int | None = None,
    draft: str | None = None,
    rationale: str = "",
    instruction: str = "",
    requested_by: str = "",
    metadata: dict | None = None,
    drafted_from: str | None = None,
    now: datetime | None = None,
) -> SoulProposal:
    """Create a pending proposal with its token, its diff against SOUL.md on disk and its expiry.

    `review` and `suggest` take the model's `draft` and `drafted_from`, the hash of the SOUL.md the model
    was shown: `memory.soul_drafts.soul_propose`, the entry point for every mode, asks the model first.
    """
    require_owner(trust)
    if mode in CURATION_MODES and draft is None:
        raise UnsupportedMode(f"{mode} needs a draft: the model writes it (memory.soul_drafts.soul_propose)")
    check_agent(agent_id)
    content, label = _proposed(agent_id, mode, revision, draft)
    base, base_hash = soul_current(agent_id)
    if drafted_from is not None and drafted_from != base_hash:
        raise StaleBase("SOUL.md changed while the draft was being written; ask for a new proposal")
    if base_hash and base_hash == content_hash(content):
        raise NoChange("SOUL.md already has this content; nothing to propose")
    resource = Resource.objects.filter(agent_id=agent_id, resource_type=SOUL).first()
    now = now or timezone.now()
    return SoulProposal.objects.create(
        token="".join(secrets.choice(TOKEN_ALPHABET) for _ in range(TOKEN_LENGTH)),
        agent_id=agent_id,
        mode=mode,
        instruction=instruction,
        base_hash=base_hash,
        base_revision=resource.current_revision if resource else None,
        target_revision=revision if mode == Mode.REVERT else None,
        proposed_content=content,
        proposed_hash=content_hash(content),
        diff=unified_diff(base, content, from_label="SOUL.md (current)", to_label=label),
        rationale=rationale,
        metadata=metadata or {},
        requested_by=requested_by,
        expires_at=now + PROPOSAL_TTL,
    )


def _pending(agent_id: str, token: str, now: datetime) -> SoulProposal:
    proposal = SoulProposal.objects.filter(agent_id=agent_id, token=token).first()
    if proposal is None:
        raise UnknownProposal("no SOUL.md proposal with this token")
    if proposal.status == Status.PENDING and proposal.expires_at <= now:
        SoulProposal.objects.filter(pk=proposal.pk, status=Status.PENDING).update(status=Status.EXPIRED)
        proposal.status = Status.EXPIRED
    if proposal.status == Status.EXPIRED:
        raise ProposalExpired("this SOUL.md proposal has expired; ask for a new one")
    if proposal.status != Status.PENDING:
        raise ProposalClosed(f"this SOUL.md proposal was already {proposal.status}")
    return proposal


def _claim(proposal: SoulProposal, status: str, now: datetime) -> None:
    # A conditional UPDATE decides: of two concurrent applies (or an apply and a deny), one wins.
    won = SoulProposal.objects.filter(pk=proposal.pk, status=Status.PENDING, expires_at__gt=now).update(
        status=status, decided_at=now
    )
    if not won:
        _pending(proposal.agent_id, proposal.token, now)  # raises the reason
        raise ProposalClosed("this SOUL.md proposal was decided concurrently")


@dataclass(frozen=True)
class SoulApplyResult:
    proposal: SoulProposal
    result: RollbackResult | None  # revert and reset
    revision: int | None  # the new revision, None when SOUL.md already had the content


def _provenance(proposal: SoulProposal) -> dict:
    base = {"via": f"soul_{proposal.mode}", "proposal_id": proposal.pk}
    if proposal.mode == Mode.RESET:
        return {**base, "target": "shipped_template", "template_hash": proposal.proposed_hash}
    if proposal.mode == Mode.REVERT:
        return base
    return {**base, "instruction": proposal.instruction, "base_hash": proposal.base_hash,
            "base_revision": proposal.base_revision, "rationale": proposal.rationale}


def soul_apply(*, agent_id: str, token: str, trust: str, now: datetime | None = None) -> SoulApplyResult:
    """Write a pending proposal's SOUL.md as a new revision (refused when expired, decided or stale)."""
    require_owner(trust)
    check_agent(agent_id)
    now = now or timezone.now()
    proposal = _pending(agent_id, token, now)
    with resource_file_locked(agent_id=agent_id, resource_type=SOUL, why="soul_apply") as locked:
        _claim(proposal, Status.APPLIED, now)
        if proposal.mode in CURATION_MODES:
            current = locked.current  # after any hand edit of this node's mirror was recorded
            if (current.content_hash if current else "") != proposal.base_hash:
                raise StaleBase("SOUL.md changed after this proposal was drafted; ask for a new proposal")
            revision = locked.write(proposal.proposed_content, MutationSource.SOUL_CURATION, _provenance(proposal))
            result = None
            number = revision.revision if revision else None
        else:
            result = locked.rollback_to(proposal.proposed_content, target_revision=proposal.target_revision,
                                        provenance=_provenance(proposal))
            number = result.revision.revision if result.revision else None
        SoulProposal.objects.filter(pk=proposal.pk).update(applied_revision=number)
    proposal.refresh_from_db()
    return SoulApplyResult(proposal, result, number)


def soul_deny(*, agent_id: str, token: str, trust: str, now: datetime | None = None) -> SoulProposal:
    """Close a pending proposal without writing anything."""
    require_owner(trust)
    check_agent(agent_id)
    now = now or timezone.now()
    proposal = _pending(agent_id, token, now)
    _claim(proposal, Status.DENIED, now)
    proposal.refresh_from_db()
    return proposal
