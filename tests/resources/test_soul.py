"""SOUL.md proposals: propose with a token and a diff, then apply or deny; stale, expired, forbidden."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fermix_site import generations
from resources import errors
from resources.bootstrap import bootstrap_seed, bootstrap_template
from resources.catalog import content_hash
from resources.models import ResourceRevision, SoulProposal
from resources.services import resource_write_file
from resources.soul import PROPOSAL_TTL, soul_apply, soul_deny, soul_propose
from tests.conftest import run_manage

pytestmark = pytest.mark.django_db
OWNER = "operator"


def soul_file(home):
    return home.home / "bootstrap" / "main" / "SOUL.md"


def edit_soul(content):
    return resource_write_file(agent_id="main", resource_type="soul_md", content=content, mutation_source="manual_edit")


@pytest.fixture
def seeded(home):
    bootstrap_seed(agent_id="main")
    edit_soul("A different persona.\n")  # r2
    return home


def test_revert_proposes_a_diff_with_an_unguessable_token_and_an_expiry(seeded):
    now = timezone.now()
    proposal = soul_propose(agent_id="main", mode="revert", revision=1, trust=OWNER, now=now)
    assert proposal.status == "pending"
    assert len(proposal.token) == 24 and proposal.token.isalnum()
    assert proposal.expires_at == now + PROPOSAL_TTL == now + timedelta(seconds=300)
    assert proposal.diff.startswith("--- SOUL.md (current)\n+++ SOUL.md r1\n")
    assert "-A different persona." in proposal.diff
    assert proposal.base_hash == content_hash("A different persona.\n") and proposal.base_revision == 2
    assert soul_propose(agent_id="main", mode="revert", revision=1, trust=OWNER).token != proposal.token
    assert ResourceRevision.objects.filter(resource_type="soul_md").count() == 2  # nothing written yet


def test_applying_a_revert_writes_a_rollback_revision_and_the_file(seeded):
    proposal = soul_propose(agent_id="main", mode="revert", revision=1, trust=OWNER)
    applied = soul_apply(agent_id="main", token=proposal.token, trust=OWNER)
    revision = ResourceRevision.objects.get(resource_type="soul_md", revision=3)
    assert applied.revision == 3 and applied.proposal.status == "applied" and applied.proposal.applied_revision == 3
    assert revision.mutation_source == "rollback"
    assert revision.provenance == {"from_revision": 2, "target_revision": 1, "via": "soul_revert",
                                   "proposal_id": proposal.pk}
    assert soul_file(seeded).read_text() == bootstrap_template("soul_md")


def test_applying_a_reset_restores_the_shipped_template(seeded):
    proposal = soul_propose(agent_id="main", mode="reset", trust=OWNER)
    soul_apply(agent_id="main", token=proposal.token, trust=OWNER)
    revision = ResourceRevision.objects.get(resource_type="soul_md", revision=3)
    assert revision.mutation_source == "rollback"
    assert revision.provenance["via"] == "soul_reset" and revision.provenance["target"] == "shipped_template"
    assert "target_revision" not in revision.provenance
    assert soul_file(seeded).read_text() == bootstrap_template("soul_md")


def test_a_curation_draft_is_applied_as_soul_curation(seeded):
    proposal = soul_propose(agent_id="main", mode="suggest", trust=OWNER, draft="Sharper persona.\n",
                            rationale="The owner asked for brevity.", instruction="be brief",
                            metadata={"model": "test-model"})
    soul_apply(agent_id="main", token=proposal.token, trust=OWNER)
    revision = ResourceRevision.objects.get(resource_type="soul_md", revision=3)
    assert revision.mutation_source == "soul_curation"
    assert revision.provenance["instruction"] == "be brief" and revision.provenance["base_revision"] == 2
    assert soul_file(seeded).read_text() == "Sharper persona.\n"


def test_a_curation_draft_is_refused_when_soul_md_changed_underneath(seeded):
    proposal = soul_propose(agent_id="main", mode="review", trust=OWNER, draft="Drafted against r2.\n")
    soul_file(seeded).write_text("Edited by hand after the draft.\n")
    with pytest.raises(errors.StaleBase) as refused:
        soul_apply(agent_id="main", token=proposal.token, trust=OWNER)
    assert refused.value.code == "stale_base" and refused.value.http_status == 409
    assert soul_file(seeded).read_text() == "Edited by hand after the draft.\n"
    assert not ResourceRevision.objects.filter(mutation_source="soul_curation").exists()
    assert SoulProposal.objects.get().status == "pending"


def test_revert_and_reset_apply_over_a_changed_base_and_keep_the_edit_in_history(seeded):
    proposal = soul_propose(agent_id="main", mode="revert", revision=1, trust=OWNER)
    soul_file(seeded).write_text("Edited by hand after the proposal.\n")
    soul_apply(agent_id="main", token=proposal.token, trust=OWNER)
    sources = list(ResourceRevision.objects.filter(resource_type="soul_md").order_by("revision")
                   .values_list("mutation_source", flat=True))
    assert sources == ["seed", "manual_edit", "manual_edit", "rollback"]
    assert soul_file(seeded).read_text() == bootstrap_template("soul_md")


def test_an_expired_token_is_refused(seeded):
    proposal = soul_propose(agent_id="main", mode="reset", trust=OWNER)
    with pytest.raises(errors.ProposalExpired) as refused:
        soul_apply(agent_id="main", token=proposal.token, trust=OWNER, now=proposal.expires_at)
    assert refused.value.code == "expired"
    assert SoulProposal.objects.get().status == "expired"
    assert soul_file(seeded).read_text() == "A different persona.\n"
    with pytest.raises(errors.ProposalExpired):
        soul_apply(agent_id="main", token=proposal.token, trust=OWNER)


def test_a_token_is_used_once_and_deny_writes_nothing(seeded):
    applied = soul_propose(agent_id="main", mode="reset", trust=OWNER)
    soul_apply(agent_id="main", token=applied.token, trust=OWNER)
    with pytest.raises(errors.ProposalClosed):
        soul_apply(agent_id="main", token=applied.token, trust=OWNER)
    denied = soul_propose(agent_id="main", mode="revert", revision=2, trust=OWNER)
    assert soul_deny(agent_id="main", token=denied.token, trust=OWNER).status == "denied"
    with pytest.raises(errors.ProposalClosed):
        soul_apply(agent_id="main", token=denied.token, trust=OWNER)
    assert ResourceRevision.objects.filter(resource_type="soul_md").count() == 3


def test_only_the_owner_may_propose_apply_or_deny(seeded):
    with pytest.raises(errors.Forbidden) as refused:
        soul_propose(agent_id="main", mode="reset", trust="guest")
    assert refused.value.http_status == 403
    proposal = soul_propose(agent_id="main", mode="reset", trust=OWNER)
    with pytest.raises(errors.Forbidden):
        soul_apply(agent_id="main", token=proposal.token, trust="guest")
    with pytest.raises(errors.Forbidden):
        soul_deny(agent_id="main", token=proposal.token, trust="guest")
    assert SoulProposal.objects.get().status == "pending"


def test_tokens_are_bound_to_their_agent(seeded):
    proposal = soul_propose(agent_id="main", mode="reset", trust=OWNER)
    with pytest.raises(errors.UnknownProposal):
        soul_apply(agent_id="other", token=proposal.token, trust=OWNER)
    with pytest.raises(errors.UnknownProposal):
        soul_apply(agent_id="main", token="not-a-token", trust=OWNER)


def test_proposals_that_change_nothing_or_need_a_model_are_refused(seeded):
    with pytest.raises(errors.NoChange):
        soul_propose(agent_id="main", mode="revert", revision=2, trust=OWNER)
    with pytest.raises(errors.UnsupportedMode):
        soul_propose(agent_id="main", mode="suggest", trust=OWNER)
    with pytest.raises(errors.UnsupportedMode):
        soul_propose(agent_id="main", mode="rewrite", trust=OWNER)
    with pytest.raises(errors.UnknownRevision):
        soul_propose(agent_id="main", mode="revert", revision=9, trust=OWNER)


@pytest.mark.django_db(transaction=True)
def test_an_apply_in_another_process_invalidates_this_process_cached_prompt(seeded):
    cache = generations.local_cache()
    builds = []

    def compose():
        builds.append(soul_file(seeded).read_text())
        return builds[-1]

    names = ["prompt:main"]
    assert cache.read_through("composed", names, compose) == "A different persona.\n"
    assert cache.read_through("composed", names, compose) == "A different persona.\n"
    assert len(builds) == 1  # served from the cache
    proposal = soul_propose(agent_id="main", mode="reset", trust=OWNER)
    done = run_manage("soul", "apply", proposal.token)
    assert done.returncode == 0, done.stderr
    assert cache.read_through("composed", names, compose) == bootstrap_template("soul_md")
    assert len(builds) == 2
