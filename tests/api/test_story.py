"""A whole bot conversation over HTTP against the real server (`manage.py serve`: gunicorn and the
django-q2 cluster), with the fake model provider on loopback.

The story: messages, a turn with a tool call, its commit and the background review the cluster runs
(it writes USER.md), a bot-driven commit and a review now, compaction with its notice, /compact,
/clear, a SOUL.md revert proposed and applied, a resource rollback, and a scheduled job the cluster
fires.
"""

import json
import signal
import subprocess
import sys
import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from memory.compactor import NOTICE
from tests.api.model_script import Script
from tests.conftest import ROOT, process_env, run_manage
from tests.fakeprovider import Reply, provider_config_toml, tool_call, unused_port, use_config

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CONV = "/agents/main/conversations/telegram:4242"
FACTS = {"short answers": ("preference", "answer_length", "prefers short answers"),
         "vegetarian": ("preference", "diet", "is vegetarian")}


def reviewer(request):
    """The reviewer's model: adds a preference for each known phrase in the messages under review."""
    data = json.loads(request.body["messages"][-1]["content"].split("\n", 1)[1])
    said = " ".join(message["text"] for message in data["user_messages"])
    operations = [{"op": "add", "category": category, "key": key, "value": value}
                  for phrase, (category, key, value) in FACTS.items() if phrase in said]
    return Reply(text=json.dumps({"operations": operations}) if operations else "Nothing to save.")


def wait_for(what, predicate, timeout=120):
    """Poll until `predicate()` is truthy; the timeout only bounds a broken run, it asserts no speed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"gave up waiting for {what}")


class Api:
    def __init__(self, base: str, key: str | None):
        self.http = httpx.Client(base_url=base + "/api/v1", timeout=60,
                                 headers={"Authorization": f"Bearer {key}"} if key else {})

    def get(self, path, **params):
        return self.http.get(path, params=params)

    def post(self, path, body=None, **params):
        return self.http.post(path, json={} if body is None else body, params=params)

    def ok(self, method, path, *args, **params):
        response = getattr(self, method)(path, *args, **params)
        assert response.status_code < 300, (path, response.status_code, response.text)
        return response.json()


@pytest.fixture
def server(home, fake_provider):
    script = Script()
    script.defaults["reviewer"] = reviewer
    fake_provider.responder = script
    config = provider_config_toml(fake_provider, context_window=8192)
    with use_config(config):
        env = process_env(FERMIX_HOME=home.home, FERMIX_PORT=unused_port(), FERMIX_WEB_WORKERS=2)
        setup = run_manage("fermix_setup", "--noinput", env=env)
        assert setup.returncode == 0, setup.stderr
        keys = {}
        # The bot runs the owner's own chat, so its key may say when the owner speaks.
        for name, role, *flags in (("ops", "operator"), ("telegram", "channel", "--may-assert-operator")):
            created = run_manage("apikey_create", "--name", name, "--role", role, *flags, env=env)
            assert created.returncode == 0, created.stderr
            keys[role] = created.stdout.strip()
        process = subprocess.Popen([sys.executable, "manage.py", "serve"], cwd=ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        base = f"http://127.0.0.1:{env['FERMIX_PORT']}"
        try:
            wait_for("the server and its cluster", lambda: httpx.get(base + "/healthz").json()["worker"]["state"]
                     == "alive")
            yield base, keys, script, home.home
        finally:
            process.send_signal(signal.SIGINT)
            output, _ = process.communicate(timeout=60)
            assert "Traceback" not in output, output[-5000:]


def test_a_whole_bot_conversation(server):
    base, keys, script, fermix_home = server
    bot, ops, nobody = Api(base, keys["channel"]), Api(base, keys["operator"]), Api(base, None)
    assert httpx.get(base + "/api/v1/openapi.json").json()["info"]["title"] == "Fermix API"
    refused = nobody.get("/agents/main/memories")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "missing_key"

    # Messages: the bot records what was said.
    bot.ok("post", CONV + "/messages", {"role": "user", "content": "Hi, I'm Ana. I prefer short answers.",
                                        "sender": "ana", "trust": "operator"})
    bot.ok("post", CONV + "/messages", {"role": "assistant", "content": "Hello Ana!"})
    assert [m["role"] for m in bot.ok("get", CONV + "/messages")["messages"]] == ["user", "assistant"]

    # A turn with a tool call: the model stores a fact, then answers; the turn commits.
    script.push("turn", tool_call("memory_store", {"key": "home_city", "value": "lives in Lisbon",
                                                   "category": "identity"}),
                Reply(text="Noted, Ana.", prompt_tokens=400))
    turn = bot.ok("post", CONV + "/turns", {"content": "Remember that I live in Lisbon.", "trust": "operator"})
    assert (turn["reply"], turn["usage"]["tool_calls"], turn["usage"]["model_calls"]) == ("Noted, Ana.", 1, 2)
    user_md = fermix_home / "memory/main/USER.md"
    assert user_md.read_text() == "## Identity\n- lives in Lisbon\n"

    # The commit queued a background review; the cluster runs it and it writes USER.md.
    assert turn["commit"]["review"] == "queued"
    background = wait_for("the background review", lambda: [
        r for r in bot.ok("get", "/agents/main/review-runs")["runs"] if r["trigger"] == "background"
        and r["finished_at"]])
    assert (background[0]["status"], background[0]["ops_added"]) == ("ok", 1)
    # The run is recorded first, then the prompt files are rebuilt from its rows.
    wait_for("USER.md rebuilt", lambda: "## Preferences\n- prefers short answers\n" in user_md.read_text())

    # A turn the bot ran with its own model, then its commit; then a review now writes USER.md again.
    bot.ok("post", CONV + "/messages", {"role": "user", "content": "I am vegetarian. My itinerary: "
                                        + "Lisbon Porto " * 1500, "trust": "operator"})
    bot.ok("post", CONV + "/messages", {"role": "assistant", "content": "Got it."})
    commit = bot.ok("post", CONV + "/commit", {"peak_prompt_tokens": 7000, "context_window": 100_000,
                                               "trust": "operator"})
    assert (commit["review"], commit["compaction"]) == ("queued", "not_needed")
    review = ops.ok("post", "/agents/main/review", {"conversation": "telegram:4242"})
    assert (review["total"], review["results"][0]["status"], review["results"][0]["ops_added"]) == (1, "ok", 1)
    assert "- is vegetarian" in user_md.read_text()
    revisions = bot.ok("get", "/agents/main/resources/user_md/revisions")["revisions"]
    assert [r["mutation_source"] for r in revisions] == ["extraction_rebuild"] * 3

    # The next turn runs with a window the last peak crossed: compaction first, with its notice.
    script.push("turn", Reply(text="Pack light.", prompt_tokens=300))
    turn = bot.ok("post", CONV + "/turns", {"content": "What should I pack?", "context_window": 8000})
    assert turn["notices"] == [NOTICE] and turn["reply"] == "Pack light."
    window = bot.ok("get", CONV + "/messages")["messages"]
    assert window[0]["kind"] == "checkpoint" and window[-1]["content"] == "Pack light."
    checkpoints = bot.ok("get", "/agents/main/resources/checkpoint/revisions", scope="telegram:4242")
    assert checkpoints["revisions"][0]["mutation_source"] == "compaction"

    # /compact: refused to a guest, done for the owner.
    assert bot.post(CONV + "/compact", {"trust": "guest"}).status_code == 403
    compacted = bot.ok("post", CONV + "/compact", {"trust": "operator"})
    assert compacted["compacted"] is True and compacted["message"].startswith("Compacted")

    # /clear: the window empties, long-term memory stays.
    bot.ok("post", CONV + "/messages", {"role": "user", "content": "Thanks, that's all."})
    assert bot.ok("post", CONV + "/clear", {"trust": "operator"})["cleared"] == 1
    assert bot.ok("get", CONV + "/messages")["messages"] == []
    keys_kept = {m["key"] for m in bot.ok("get", "/agents/main/memories")["memories"]}
    assert {"answer_length", "home_city"} <= keys_kept

    # SOUL.md: a hand edit is picked up, then reverted by proposal and apply.
    soul = fermix_home / "bootstrap/main/SOUL.md"
    original = soul.read_text()
    soul.write_text(original + "\nAnswer in rhymes.\n")
    assert "Answer in rhymes." in str(bot.ok("get", "/agents/main/prompt")["system_messages"])
    assert [r["revision"] for r in bot.ok("get", "/agents/main/resources/soul_md/revisions")["revisions"]] == [2, 1]
    proposal = bot.ok("post", "/agents/main/soul/proposals", {"mode": "revert", "revision": 1, "trust": "operator"})
    assert "-Answer in rhymes." in proposal["diff"]
    applied = bot.ok("post", f"/agents/main/soul/proposals/{proposal['token']}/apply", {"trust": "operator"})
    assert applied["revision"] == 3 and soul.read_text() == original
    assert "Answer in rhymes." not in str(bot.ok("get", "/agents/main/prompt")["system_messages"])

    # A resource rollback: operator only; checkpoints refuse.
    assert bot.post("/agents/main/resources/user_md/rollback", {"revision": 1}).status_code == 403
    rolled = ops.ok("post", "/agents/main/resources/user_md/rollback", {"revision": 1})
    assert rolled["status"] == "rolled_back" and rolled["caveat"]
    assert user_md.read_text() == "## Identity\n- lives in Lisbon\n"
    assert ops.post("/agents/main/resources/checkpoint/rollback", {"revision": 1}).status_code == 409

    # A scheduled job: the cluster fires it, the run is recorded and its summary kept.
    job = ops.ok("post", "/agents/main/jobs", {
        "name": "morning digest", "prompt": "Anything new?", "schedule_type": "once",
        "run_at": (timezone.now() + timedelta(seconds=2)).isoformat()})
    runs = wait_for("the scheduled run", lambda: [
        r for r in bot.ok("get", f"/agents/main/jobs/{job['id']}/runs")["runs"] if r["finished_at"]])
    assert (runs[0]["status"], runs[0]["trigger"], runs[0]["output"]) == ("ok", "schedule", "Nothing new today.")
    summary = bot.ok("get", "/agents/main/memories", scope_type="job")["memories"]
    assert [(m["key"], m["scope_id"], m["value"]) for m in summary] == [
        ("latest", f"job:{job['id']}", "Nothing new today.")]
    assert f"job:{job['id']}" in {s["key"] for s in bot.ok("get", "/agents/main/memory-sources")["sources"]}
    assert bot.ok("get", f"/agents/main/jobs/{job['id']}")["enabled"] is False  # a once job is done
    queued = ops.post(f"/agents/main/jobs/{job['id']}/run")
    assert queued.status_code == 202
    wait_for("the queued run", lambda: [r for r in bot.ok("get", f"/agents/main/jobs/{job['id']}/runs")["runs"]
                                        if r["id"] == queued.json()["id"] and r["status"] == "ok"])
