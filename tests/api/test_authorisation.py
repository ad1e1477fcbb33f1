"""The authorisation matrix: every endpoint walked by every kind of caller.

Callers, in order: no key, a bad key, a revoked key, a key restricted to another agent, a channel key
with guest trust, a channel key with operator trust, an operator key restricted to another agent, an
operator key. Refused callers must get 401/403 with the JSON error; allowed ones anything but.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from api.services import apikey_create, apikey_revoke
from api.v1 import api
from jobs.services import job_create
from memory.models import ReviewRun
from memory.rows import memory_archive, memory_upsert
from resources.bootstrap import bootstrap_seed
from resources.services import resource_write_file
from resources.soul import soul_propose
from tests.api.conftest import Caller, error_of

pytestmark = pytest.mark.django_db

ANY, TRUST, KEY = "any", "operator trust", "operator key"
CONV = "/agents/main/conversations/telegram:1"
JOB = {"name": "digest", "prompt": "Summarise the day.", "schedule_type": "interval", "interval_seconds": 3600}

ENDPOINTS = [
    ("post", CONV + "/messages", {"role": "user", "content": "hi"}, ANY),
    ("get", CONV + "/messages", None, ANY),
    ("post", CONV + "/commit", {"peak_prompt_tokens": 10}, ANY),
    ("post", CONV + "/preflight", {}, ANY),
    ("post", CONV + "/compact", {}, TRUST),
    ("post", CONV + "/clear", {}, TRUST),
    ("post", CONV + "/turns", {"content": "hi"}, ANY),
    ("get", "/agents/main/prompt", None, ANY),
    ("post", "/agents/main/tools/memory_recall", {"conversation": "telegram:1", "arguments": {"query": "x"}}, ANY),
    ("get", "/agents/main/memories", None, ANY),
    ("post", "/memories/{live}/archive", {"reason": "stale"}, KEY),
    ("post", "/memories/{archived}/restore", {}, KEY),
    ("post", "/agents/main/review", {}, KEY),
    ("get", "/agents/main/review-runs", None, ANY),
    ("post", "/review-runs/{run}/undo", {}, KEY),
    ("get", "/agents/main/memory-sources", None, ANY),
    ("post", "/agents/main/realtime/transcripts", {"device_id": "phone", "role": "user", "text": "hi"}, ANY),
    ("get", "/agents/main/resources", None, ANY),
    ("get", "/agents/main/resources/soul_md/revisions", None, ANY),
    ("get", "/agents/main/resources/soul_md/revisions/1", None, ANY),
    ("get", "/agents/main/resources/soul_md/diff?a=1&b=2", None, ANY),
    ("post", "/agents/main/resources/soul_md/rollback", {"revision": 1}, KEY),
    ("post", "/agents/main/soul/proposals", {"mode": "revert", "revision": 1}, TRUST),
    ("post", "/agents/main/soul/proposals/{token}/apply", {}, TRUST),
    ("post", "/agents/main/soul/proposals/{token}/deny", {}, TRUST),
    ("get", "/agents/main/jobs", None, ANY),
    ("post", "/agents/main/jobs", JOB, KEY),
    ("get", "/agents/main/jobs/{job}", None, ANY),
    ("patch", "/agents/main/jobs/{job}", {"name": "renamed"}, KEY),
    ("post", "/agents/main/jobs/{job}/run", {}, KEY),
    ("get", "/agents/main/jobs/{job}/runs", None, ANY),
    ("delete", "/agents/main/jobs/{job}", None, KEY),
]


@pytest.fixture
def world(home):
    """One of everything an endpoint can name: rows, a review run, SOUL.md revisions, a proposal, a job."""
    bootstrap_seed(agent_id="main")
    soul = (home.home / "bootstrap/main/SOUL.md").read_text()
    resource_write_file(agent_id="main", resource_type="soul_md", content=soul + "\nBe brief.\n",
                        mutation_source="manual_edit")
    live, _ = memory_upsert(agent_id="main", owner_id="default", scope_type="owner", scope_id="default",
                            key="city", value="lives in Lisbon", category="identity", actor_type="operator")
    archived, _ = memory_upsert(agent_id="main", owner_id="default", scope_type="owner", scope_id="default",
                                key="pet", value="has a cat", category="identity", actor_type="operator")
    memory_archive(memory_id=archived.id, archived_by="test")
    run = ReviewRun.objects.create(agent_id="main", conversation_key="telegram:1:root", owner_id="default",
                                   trigger="now", status="ok", started_at=timezone.now())
    token = soul_propose(agent_id="main", mode="revert", revision=1, trust="operator").token
    job = job_create(agent_id="main", name="digest", prompt="Summarise the day.", schedule_type="once",
                     run_at=timezone.now() + timedelta(days=1))
    return {"live": live.id, "archived": archived.id, "run": run.id, "token": token, "job": job.id}


def callers(client):
    revoked = apikey_create(name="revoked", role="operator")[1]
    apikey_revoke(name="revoked")
    key = {name: apikey_create(name=name, role=role, agents=agents)[1] for name, role, agents in (
        ("other-bot", "channel", ["other"]), ("bot", "channel", []), ("other-ops", "operator", ["other"]),
        ("ops", "operator", ["main", "other"]))}
    return [
        ("no key", Caller(client, None), False, (401, "missing_key")),
        ("bad key", Caller(client, "fmx_" + "x" * 43), False, (401, "invalid_key")),
        ("revoked key", Caller(client, revoked), False, (401, "revoked_key")),
        ("key for another agent", Caller(client, key["other-bot"]), False, (403, None)),
        ("channel, guest", Caller(client, key["bot"]), False, (403, None)),
        ("channel, operator trust", Caller(client, key["bot"]), True, (403, None)),
        ("operator key for another agent", Caller(client, key["other-ops"]), True, (403, "agent_not_allowed")),
        ("operator key", Caller(client, key["ops"]), False, None),
    ]


def refusal(rule: str, name: str, expected):
    """The (status, code) this caller must get, or None when it is allowed."""
    if name == "operator key":
        return None
    if name == "channel, guest" and rule == ANY:
        return None
    if name == "channel, operator trust" and rule in (ANY, TRUST):
        return None
    if name == "key for another agent":
        return 403, None  # agent_not_allowed, or operator_key_required on /memories and /review-runs
    if name.startswith("channel"):
        return 403, "operator_key_required" if rule == KEY else "operator_trust_required"
    return expected


@pytest.mark.parametrize("method, path, body, rule", ENDPOINTS, ids=[f"{m} {p}" for m, p, _, _ in ENDPOINTS])
def test_it_lets_in_exactly_the_callers_allowed(client, world, method, path, body, rule):
    path = path.format(**world)
    for name, caller, vouches, expected in callers(client):
        sent = dict(body, trust="operator") if vouches and body is not None else body
        response = caller.call(method, path, sent)
        refused = refusal(rule, name, expected)
        if refused is None:
            assert response.status_code not in (401, 403), (name, response.content)
            assert response["Content-Type"].startswith("application/json"), name
            continue
        status, code = error_of(response)
        assert status == refused[0], (name, response.content)
        if refused[1]:
            assert code == refused[1], (name, code)
        if status == 401:
            assert response["WWW-Authenticate"].startswith("Bearer")


def test_the_matrix_covers_every_operation_in_the_openapi_document():
    schema = api.get_openapi_schema(path_prefix="")
    documented = {(method, path) for path, operations in schema["paths"].items() for method in operations}
    walked = {(method, path.split("?")[0].replace("telegram:1", "{conv}").replace("main", "{agent}"))
              for method, path, _, _ in ENDPOINTS}
    normalised = set()
    for method, path in walked:
        for name, param in (("{live}", "{memory_id}"), ("{archived}", "{memory_id}"), ("{run}", "{run_id}"),
                            ("{job}", "{job_id}"), ("soul_md", "{resource_type}"), ("/1", "/{revision}"),
                            ("memory_recall", "{tool}")):
            path = path.replace(name, param)
        normalised.add((method, path))
    assert normalised == documented


def test_a_key_restricted_to_agents_may_use_those_agents(client, home):
    key = apikey_create(name="two", role="channel", agents=["alpha", "beta"])[1]
    caller = Caller(client, key)
    assert caller.get("/agents/alpha/memories").status_code == 200
    assert caller.get("/agents/beta/memories").status_code == 200
    assert error_of(caller.get("/agents/gamma/memories")) == (403, "agent_not_allowed")


def test_guest_is_the_default_trust_and_operator_keys_may_run_commands_without_vouching(home, bot, operator):
    bot.post(CONV + "/messages", {"role": "user", "content": "hello"})
    assert bot.get(CONV + "/messages").json()["messages"][0]["trust"] == "guest"
    assert error_of(bot.post(CONV + "/clear", {})) == (403, "operator_trust_required")
    assert error_of(bot.post(CONV + "/clear", {"trust": "guest"})) == (403, "operator_trust_required")
    assert operator.post(CONV + "/clear", {}).json()["cleared"] == 1
