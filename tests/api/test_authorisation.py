"""The authorisation matrix: every endpoint walked by every kind of caller, and every memory tool call
by every key and trust.

Callers, in order: no key, a bad key, a revoked key, a key restricted to another agent, a channel key
with guest trust, a channel key asserting operator trust, a channel key created with
`--may-assert-operator` with guest and with operator trust, an operator key restricted to another agent,
an operator key with guest and with operator trust. Refused callers must get 401/403 with the JSON
error; allowed ones anything but.
"""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from api.services import apikey_create, apikey_revoke
from api.v1 import api
from fermix_site.conf import conf
from jobs.services import job_create
from memory.conversations import message_append
from memory.models import Memory, MemorySource, ReviewRun
from memory.prompt_files import prompt_files_rebuild
from memory.rows import memory_archive, memory_upsert
from resources.bootstrap import bootstrap_seed
from resources.services import resource_write_file
from resources.soul import soul_propose
from tests.personas import Caller, error_of

pytestmark = pytest.mark.django_db

ANY, TRUST, KEY = "any", "operator trust", "operator key"
OWNER = "a key that may speak for the owner"  # stores the owner's words whatever the body says
CONV = "/agents/main/conversations/telegram:1"
# The operations whose body says who is speaking (`trust`): a channel key may assert operator trust in
# them only if it was created with --may-assert-operator.
TRUST_BODIES = {CONV + "/messages", CONV + "/commit", CONV + "/compact", CONV + "/clear", CONV + "/turns",
                "/agents/main/tools/memory_store", "/agents/main/tools/memory_recall",
                "/agents/main/tools/memory_forget", "/agents/main/tools/memory_sources_list",
                "/agents/main/soul/proposals",
                "/agents/main/soul/proposals/{token}/apply", "/agents/main/soul/proposals/{token}/deny"}  # POST
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
    ("get", "/agents/main/tools", None, ANY),
    ("post", "/agents/main/tools/memory_store", {"conversation": "telegram:1", "arguments": {"key": "k", "value": "v"}},
     ANY),
    ("post", "/agents/main/tools/memory_recall", {"conversation": "telegram:1", "arguments": {"query": "x"}}, ANY),
    ("post", "/agents/main/tools/memory_forget", {"conversation": "telegram:1", "arguments": {"id": 1}}, ANY),
    ("post", "/agents/main/tools/memory_sources_list", {"conversation": "telegram:1"}, ANY),
    ("get", "/agents/main/memories", None, ANY),
    ("post", "/agents/main/memories", {"key": "food", "value": "likes figs", "category": "preference"}, KEY),
    ("get", "/memories/{live}", None, ANY),
    ("patch", "/memories/{live}", {"value": "lives in Porto", "reason": "moved"}, KEY),
    ("get", "/agents/main/conversations", None, ANY),
    ("post", "/memories/{live}/archive", {"reason": "stale"}, KEY),
    ("post", "/memories/{archived}/restore", {}, KEY),
    ("post", "/memories/{live}/approve", {"reason": "yes"}, KEY),  # nothing waits: 409 for who may decide
    ("post", "/memories/{live}/reject", {"reason": "no"}, KEY),
    ("post", "/agents/main/review", {}, KEY),
    ("get", "/agents/main/review-runs", None, ANY),
    ("post", "/review-runs/{run}/undo", {}, KEY),
    ("get", "/agents/main/memory-sources", None, ANY),
    ("post", "/agents/main/realtime/transcripts", {"device_id": "phone", "role": "user", "text": "hi"}, OWNER),
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
    key = {name: apikey_create(name=name, role=role, agents=agents, may_assert_operator=vouches)[1]
           for name, role, agents, vouches in (
               ("other-bot", "channel", ["other"], False), ("bot", "channel", [], False),
               ("owner-bot", "channel", [], True), ("other-ops", "operator", ["other"], False),
               ("ops", "operator", ["main", "other"], False))}
    return [
        ("no key", Caller(client, None), False, (401, "missing_key")),
        ("bad key", Caller(client, "fmx_" + "x" * 43), False, (401, "invalid_key")),
        ("revoked key", Caller(client, revoked), False, (401, "revoked_key")),
        ("key for another agent", Caller(client, key["other-bot"]), False, (403, None)),
        ("channel, guest", Caller(client, key["bot"]), False, (403, None)),
        ("channel, operator trust", Caller(client, key["bot"]), True, (403, None)),
        ("owner bot, guest", Caller(client, key["owner-bot"]), False, (403, None)),
        ("owner bot, operator trust", Caller(client, key["owner-bot"]), True, (403, None)),
        ("operator key for another agent", Caller(client, key["other-ops"]), True, (403, "agent_not_allowed")),
        ("operator key, guest", Caller(client, key["ops"]), False, None),
        ("operator key, operator trust", Caller(client, key["ops"]), True, None),
    ]


def refusal(rule: str, method: str, path: str, name: str, expected):
    """The (status, code) this caller must get at this endpoint, or None when it is allowed."""
    if name.startswith("operator key,"):
        return None
    if name == "key for another agent":
        return 403, None  # agent_not_allowed, or operator_key_required on /memories and /review-runs
    if not name.startswith(("channel", "owner bot")):
        return expected
    if rule == KEY:
        return 403, "operator_key_required"
    if rule == OWNER and name.startswith("channel"):
        return 403, "trust_not_allowed"
    if name == "channel, operator trust" and method == "post" and path in TRUST_BODIES:
        return 403, "trust_not_allowed"
    if rule == TRUST and name != "owner bot, operator trust":
        return 403, "operator_trust_required"
    return None


@pytest.mark.parametrize("method, path, body, rule", ENDPOINTS, ids=[f"{m} {p}" for m, p, _, _ in ENDPOINTS])
def test_it_lets_in_exactly_the_callers_allowed(client, world, method, path, body, rule):
    for name, caller, vouches, expected in callers(client):
        sent = dict(body, trust="operator") if vouches and body is not None else body
        response = caller.call(method, path.format(**world), sent)
        refused = refusal(rule, method, path, name, expected)
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
                            ("{job}", "{job_id}"), ("soul_md", "{resource_type}"), ("/1", "/{revision}")):
            path = path.replace(name, param)
        normalised.add((method, path))
    assert normalised == documented


def test_the_matrix_knows_every_operation_whose_body_says_who_is_speaking():
    schema = api.get_openapi_schema(path_prefix="")
    bodies = schema["components"]["schemas"]
    with_trust = set()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            names = [ref.rsplit("/", 1)[-1] for ref in re.findall(r"'\$ref': '([^']+)'", str(body))]
            if any("trust" in bodies[name].get("properties", {}) for name in names):
                assert method == "post"
                with_trust.add(path)
    walked = {path.replace("telegram:1", "{conv}").replace("main", "{agent}") for path in TRUST_BODIES}
    assert walked == with_trust


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


# --- every memory tool call × every key × every trust ----------------------------------------------

HERE, ELSEWHERE = "telegram:1:root", "slack:9:root"
CATEGORIES = ("identity", "preference", "interest", "goal", "context", "directive")
TOOL_KEYS = ("channel", "owner bot", "operator")
TRUSTS = ("guest", "operator")


@pytest.fixture
def rows(home):
    """What a tool call can name: the owner's profile, this conversation's note and context row (which
    renders into MEMORY.md), another conversation's note, a message in each conversation; both prompt
    files rendered. Every value says `blue`, so every recall finds every row it is allowed to see."""
    def add(scope_type, scope_id, key, value, category=""):
        return memory_upsert(agent_id="main", owner_id="default", scope_type=scope_type, scope_id=scope_id,
                             key=key, value=value, category=category, actor_type="operator")[0].id

    ids = {"owner": add("owner", "default", "home", "lives in the blue house", "identity"),
           "note": add("conversation", HERE, "umbrella", "the blue umbrella is in the car"),
           "context": add("conversation", HERE, "room", "the meeting room is the blue one", "context"),
           "elsewhere": add("conversation", ELSEWHERE, "plan", "the blue secret plan")}
    for conversation, text in ((HERE, "the blue kite flies"), (ELSEWHERE, "the blue secret message")):
        message_append(agent_id="main", conversation=conversation, role="user", content=text)
        MemorySource.objects.create(agent_id="main", key=f"conversation:{conversation}", source_type="conversation",
                                    name=conversation)
    prompt_files_rebuild(agent_id="main", trigger="test")
    assert "blue house" in prompt_file("USER.md") and "blue one" in prompt_file("MEMORY.md")
    return ids


def prompt_file(name: str) -> str:
    return (conf.memory_dir("main") / name).read_text()


def long_term_rows() -> list[tuple]:
    """Every row but this conversation's notes: what a guest must leave as it is."""
    rows = Memory.objects.exclude(scope_type="conversation", scope_id=HERE, category="").order_by("id")
    return list(rows.values_list("id", "value", "category", "scope_type", "scope_id", "archived_at"))


# (tool, arguments, with guest trust, with operator trust): "ok" or the refusal's code. `{name}` in an
# argument is the id of that row of `rows`.
TOOL_CALLS = [
    ("memory_store", {"key": "parking", "value": "parked on blue level 3"}, "ok", "ok"),
    *[("memory_store", {"key": "fact", "value": "a blue fact", "category": category},
       "trust_gate" if category == "directive" else "ok", "ok") for category in CATEGORIES],
    ("memory_store", {"key": "umbrella", "value": "the umbrella is at home"}, "ok", "ok"),
    ("memory_store", {"key": "room", "value": "the room is red now"}, "trust_gate", "ok"),
    ("memory_store", {"id": "{owner}", "value": "lives in a cave"}, "out_of_scope", "ok"),
    ("memory_store", {"id": "{elsewhere}", "value": "no plan"}, "out_of_scope", "ok"),
    ("memory_store", {"id": "{context}", "value": "the room is red now"}, "trust_gate", "ok"),
    ("memory_store", {"id": "{note}", "value": "the umbrella is at home"}, "ok", "ok"),
    ("memory_store", {"id": "{note}", "value": "is an impostor", "category": "identity"}, "ok", "ok"),
    ("memory_forget", {"id": "{owner}"}, "out_of_scope", "ok"),
    ("memory_forget", {"id": "{elsewhere}"}, "out_of_scope", "ok"),
    ("memory_forget", {"id": "{context}"}, "trust_gate", "ok"),
    ("memory_forget", {"id": "{note}"}, "ok", "ok"),
    *[("memory_recall", {"query": "blue", "scope": scope, "source": source},
       "ok" if scope == "current" else "operator_only", "ok")
      for scope in ("current", "owner", "all") for source in ("memories", "history", "all")],
    ("memory_recall", {"key": "home"}, "ok", "ok"),
    ("memory_sources_list", {}, "ok", "ok"),
]
# What operator trust finds that a guest must not: another conversation, the owner's profile.
OUT_OF_REACH = ("secret", "slack:9", "blue house")


def tool_call_id(call) -> str:
    tool, arguments, _, _ = call
    return tool.removeprefix("memory_") + " " + ",".join(f"{k}={v}" for k, v in arguments.items() if k != "value")


def speaking_trust(key: str, trust: str) -> str | None:
    """The trust the call runs with, or None when asserting it is refused."""
    return None if (key, trust) == ("channel", "operator") else trust


@pytest.mark.parametrize("trust", TRUSTS)
@pytest.mark.parametrize("key", TOOL_KEYS)
@pytest.mark.parametrize("call", TOOL_CALLS, ids=[tool_call_id(c) for c in TOOL_CALLS])
def test_a_guest_tool_call_touches_only_its_conversation(client, rows, call, key, trust):
    tool, arguments, as_guest, as_operator = call
    arguments = {name: int(value.format(**rows)) if str(value).startswith("{") else value
                 for name, value in arguments.items()}
    caller = Caller(client, apikey_create(name="k", role="channel" if key != "operator" else "operator",
                                          may_assert_operator=key == "owner bot")[1])
    before, files = long_term_rows(), (prompt_file("USER.md"), prompt_file("MEMORY.md"))
    response = caller.post(f"/agents/main/tools/{tool}", {"conversation": "telegram:1", "trust": trust,
                                                          "arguments": arguments})
    speaking = speaking_trust(key, trust)
    if speaking is None:
        assert error_of(response) == (403, "trust_not_allowed")
        assert long_term_rows() == before and Memory.objects.filter(key__in=["parking", "fact"]).count() == 0
        return
    assert response.status_code == 200, response.content
    answer = response.json()
    assert (answer["data"]["error"] if not answer["ok"] else "ok") == (as_guest if speaking == "guest"
                                                                       else as_operator), answer
    if speaking == "operator":
        return
    assert long_term_rows() == before
    assert (prompt_file("USER.md"), prompt_file("MEMORY.md")) == files
    assert not any(word in response.content.decode() for word in OUT_OF_REACH), answer
    if tool == "memory_store" and answer["ok"]:
        stored = Memory.objects.get(pk=answer["data"]["id"])
        assert (stored.scope_type, stored.scope_id, stored.category) == ("conversation", HERE, "")


@pytest.mark.parametrize("arguments, finds", [
    ({"query": "blue", "scope": "owner", "source": "history"}, "blue secret message"),
    ({"query": "blue", "scope": "all", "source": "memories"}, "blue secret plan"),
    ({"query": "blue"}, "blue house"),
    ({}, "slack:9"),
])
def test_operator_trust_reaches_what_a_guest_does_not(client, rows, arguments, finds):
    caller = Caller(client, apikey_create(name="owner-bot", role="channel", may_assert_operator=True)[1])
    tool = "memory_recall" if arguments else "memory_sources_list"
    body = {"conversation": "telegram:1", "arguments": arguments}
    assert finds in caller.post(f"/agents/main/tools/{tool}", {**body, "trust": "operator"}).content.decode()
    assert finds not in caller.post(f"/agents/main/tools/{tool}", body).content.decode()


def test_an_operator_key_that_says_nothing_speaks_as_a_guest(client, rows):
    caller = Caller(client, apikey_create(name="ops", role="operator")[1])
    body = {"conversation": "telegram:1", "arguments": {"key": "city", "value": "lives in Porto",
                                                        "category": "identity"}}
    stored = caller.post("/agents/main/tools/memory_store", body).json()
    assert stored["ok"] and (stored["data"]["scope_type"], stored["data"]["category"]) == ("conversation", "")
    assert "Porto" not in prompt_file("USER.md")
