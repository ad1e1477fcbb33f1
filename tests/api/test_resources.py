"""Resources over HTTP: list, history, revisions, diff, rollback; SOUL.md proposals; review and undo."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fermix_site.conf import conf
from memory.models import ReviewState
from memory.prompt_files import prompt_files_rebuild
from memory.rows import memory_upsert
from resources.bootstrap import bootstrap_seed
from resources.services import resource_write_file
from tests.api.model_script import Script
from tests.fakeprovider import Reply, provider_config_toml, use_config
from tests.personas import error_of

pytestmark = pytest.mark.django_db

SOUL = "/agents/main/soul/proposals"


@pytest.fixture
def seeded(home):
    bootstrap_seed(agent_id="main")
    return home


def remember(key, value, category="identity"):
    memory_upsert(agent_id="main", owner_id="default", scope_type="owner", scope_id="default", key=key, value=value,
                  category=category, actor_type="operator")
    prompt_files_rebuild(agent_id="main", trigger="test")


def test_resources_lists_each_with_its_current_revision(seeded, bot):
    listed = {r["resource_type"]: r for r in bot.get("/agents/main/resources").json()["resources"]}
    assert {"identity_md", "soul_md", "fermix_md", "realtime_md"} <= set(listed)
    soul = listed["soul_md"]
    assert soul["current_revision"] == 1 and soul["current"]["mutation_source"] == "seed"
    assert "content" not in soul["current"]


def test_history_revision_and_diff(seeded, bot):
    remember("city", "lives in Lisbon")
    remember("city", "lives in Porto")
    history = bot.get("/agents/main/resources/user_md/revisions").json()
    assert [r["revision"] for r in history["revisions"]] == [2, 1]
    newest = bot.get("/agents/main/resources/user_md/revisions", limit=1).json()["revisions"]
    assert [r["revision"] for r in newest] == [2]
    first = bot.get("/agents/main/resources/user_md/revisions/1").json()
    assert first["content"] == "## Identity\n- lives in Lisbon\n" and first["mutation_source"] == "extraction_rebuild"
    diff = bot.get("/agents/main/resources/user_md/diff", a=1, b=2, context=0).json()["diff"]
    assert "-- lives in Lisbon\n" in diff and "+- lives in Porto\n" in diff
    assert error_of(bot.get("/agents/main/resources/user_md/revisions/9")) == (404, "unknown_revision")
    assert error_of(bot.get("/agents/main/resources/user_md/revisions", scope="telegram:1")) == (404, "unknown_scope")


def test_rollback_writes_a_new_revision_and_the_file(seeded, operator):
    remember("city", "lives in Lisbon")
    remember("city", "lives in Porto")
    body = operator.post("/agents/main/resources/user_md/rollback", {"revision": 1}).json()
    assert body == {"status": "rolled_back", "resource_type": "user_md", "from_revision": 2, "target_revision": 1,
                    "revision": 3, "caveat": body["caveat"]}
    assert "rebuilt from promoted memory rows" in body["caveat"]
    assert (conf.memory_dir("main") / "USER.md").read_text() == "## Identity\n- lives in Lisbon\n"
    again = operator.post("/agents/main/resources/user_md/rollback", {"revision": 1}).json()
    assert (again["status"], again["revision"]) == ("already_at_target", None)
    assert error_of(operator.post("/agents/main/resources/user_md/rollback", {"revision": 7})) == (
        404, "unknown_revision")


def test_checkpoints_cannot_be_rolled_back(seeded, operator):
    assert error_of(operator.post("/agents/main/resources/checkpoint/rollback", {"revision": 1})) == (
        409, "checkpoint_rollback")


def test_a_soul_revert_is_proposed_then_applied(seeded, bot, owner_bot):
    original = (seeded.home / "bootstrap/main/SOUL.md").read_text()
    resource_write_file(agent_id="main", resource_type="soul_md", content=original + "\nBe curt.\n",
                        mutation_source="manual_edit")
    assert error_of(bot.post(SOUL, {"mode": "revert", "revision": 1})) == (403, "operator_trust_required")
    assert error_of(bot.post(SOUL, {"mode": "revert", "revision": 1, "trust": "operator"})) == (
        403, "trust_not_allowed")
    response = owner_bot.post(SOUL, {"mode": "revert", "revision": 1, "trust": "operator"})
    assert response.status_code == 201
    proposal = response.json()
    assert proposal["status"] == "pending" and "-Be curt.\n" in proposal["diff"] and proposal["expires_at"]
    assert (seeded.home / "bootstrap/main/SOUL.md").read_text().endswith("Be curt.\n")  # nothing written yet
    vouched = {"trust": "operator"}
    applied = owner_bot.post(f"{SOUL}/{proposal['token']}/apply", vouched).json()
    assert applied == {"token": proposal["token"], "mode": "revert", "status": "applied", "revision": 3}
    assert (seeded.home / "bootstrap/main/SOUL.md").read_text() == original
    assert error_of(owner_bot.post(f"{SOUL}/{proposal['token']}/apply", vouched)) == (409, "proposal_closed")
    assert error_of(owner_bot.post(f"{SOUL}/{proposal['token']}x/apply", vouched)) == (404, "unknown_proposal")


def test_a_denied_soul_proposal_writes_nothing(seeded, operator):
    resource_write_file(agent_id="main", resource_type="soul_md", content="Be curt.\n", mutation_source="manual_edit")
    token = operator.post(SOUL, {"mode": "reset"}).json()["token"]
    assert operator.post(f"{SOUL}/{token}/deny", {}).json()["status"] == "denied"
    assert (seeded.home / "bootstrap/main/SOUL.md").read_text() == "Be curt.\n"
    assert error_of(operator.post(SOUL, {"mode": "revert"})) == (400, "unsupported_mode")
    assert error_of(operator.post(SOUL, {"mode": "reset", "instruction": "x" * 5000})) == (422, "invalid_input")


@pytest.fixture
def reviewer(seeded, fake_provider):
    script = Script()
    fake_provider.responder = script
    with use_config(provider_config_toml(fake_provider)):
        yield script


def test_review_writes_user_md_and_undo_reverses_it(reviewer, bot, owner_bot, operator):
    conv = "/agents/main/conversations/telegram:42"
    owner_bot.post(conv + "/messages", {"role": "user", "content": "I prefer short answers.", "trust": "operator"})
    reviewer.push("reviewer", Reply(text='{"operations": [{"op": "add", "category": "preference", '
                                         '"key": "answer_length", "value": "prefers short answers"}]}'))
    body = operator.post("/agents/main/review", {"conversation": "telegram:42"}).json()
    assert body["total"] == 1
    assert body["results"][0] == {**body["results"][0], "conversation": "telegram:42:root", "status": "ok",
                                  "ops_added": 1, "input_messages": 1}
    user_md = conf.memory_dir("main") / "USER.md"
    assert "- prefers short answers" in user_md.read_text()
    run = bot.get("/agents/main/review-runs", conversation="telegram:42").json()["runs"][0]
    assert (run["status"], run["ops_added"], run["trigger"]) == ("ok", 1, "now")
    undone = operator.post(f"/review-runs/{run['id']}/undo", {}).json()
    assert undone == {"run_id": run["id"], "status": "undone", "operations_reversed": 1, "warnings": []}
    assert "short answers" not in user_md.read_text()
    assert error_of(operator.post(f"/review-runs/{run['id']}/undo", {})) == (409, "already_undone")


def test_a_review_already_running_is_a_409(reviewer, operator):
    ReviewState.objects.create(agent_id="main", conversation_key="telegram:42:root", claimed_by="worker",
                               claim_expires_at=timezone.now() + timedelta(minutes=5))
    assert error_of(operator.post("/agents/main/review", {"conversation": "telegram:42"})) == (409, "review_running")
