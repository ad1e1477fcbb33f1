"""Write api/openapi_examples.json: a real request and answer for every operation of the API.

    .venv/bin/python scripts/openapi_examples.py

Starts the real server (as `make run` does) on a fresh FERMIX_HOME in a temporary folder, with a scripted
model provider on loopback, walks a bot's and an operator's day through every operation, and keeps each
operation's first successful exchange. The OpenAPI document shows them (`api.v1`), and
tests/api/test_openapi.py checks that every operation has one and that each fits the operation's schemas.
Run it again after an operation or a schema changes.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

from tests.fakeprovider import FakeProvider, Reply, provider_config_toml  # noqa: E402
from tests.live import LiveServer  # noqa: E402

OUT = ROOT / "api/openapi_examples.json"
CONV = "telegram:12345"
MEMORY = "\n[fermix_core.memory]\ndirective_approval = true\n"  # so that approve and reject have a change to decide
LONG = 240  # longer texts are cut in the examples (the document stays readable)


def model(request) -> Reply:
    """The scripted model: each kind of call answers as a real model would, told apart by its system prompt."""
    system = json.dumps(request.body.get("messages", [])[:1]) + str(request.body.get("system", ""))
    if "You maintain the long-term memory" in system:
        return Reply(text=json.dumps({"operations": [
            {"op": "add", "key": "coffee", "value": "drinks espresso without sugar", "category": "preference"},
            {"op": "add", "key": "language", "value": "Answer in Portuguese when the owner writes in Portuguese",
             "category": "directive"},
            {"op": "add", "key": "tone", "value": "Always answer in capital letters", "category": "directive"}]}))
    if "You write the running summary" in system:
        return Reply(text="The owner said they moved to Porto last week and asked the assistant to remember it.")
    if "You curate SOUL.md" in system:
        if "emoji" in json.dumps(request.body.get("messages", [])):
            return Reply(text=json.dumps({"soul": "# SOUL\n\nWarm, brief and direct, with an emoji now and then.",
                                          "rationale": "The owner asked for more emoji."}))
        return Reply(text=json.dumps({"soul": "# SOUL\n\nWarm, brief and direct. Answers in the owner's language.",
                                      "rationale": "The owner asked for shorter answers."}))
    if "You are running the scheduled job" in system:
        return Reply(text="Nothing new today.")
    return Reply(text="You live in Porto: you told me you moved there last week.")


def trimmed(value):
    if isinstance(value, str) and len(value) > LONG:
        return value[:LONG] + "…"
    if isinstance(value, list):
        return [trimmed(v) for v in value[:4]]
    if isinstance(value, dict):
        return {k: trimmed(v) for k, v in value.items()}
    return value


class Recorder:
    def __init__(self, server: LiveServer, keys: dict[str, str]):
        self.server, self.keys, self.examples = server, keys, {}

    def __call__(self, operation: str, method: str, path: str, body=None, *, key="bot", params=None) -> dict:
        client = self.server.client(self.keys[key], timeout=120)
        response = client.request(method, "/api/v1" + path, json=body, params=params)
        assert response.status_code < 300, (operation, response.status_code, response.text)
        answer = response.json()
        if operation not in self.examples:
            example = {"status": response.status_code, "response": trimmed(answer)}
            if body is not None:
                example["request"] = body
            self.examples[operation] = example
        return answer


def day(call: Recorder) -> None:
    conv = f"/agents/main/conversations/{CONV}"
    call("append_message", "post", conv + "/messages",
         {"role": "user", "content": "I moved to Porto last week.", "sender": "ana", "trust": "operator"})
    call("read_window", "get", conv + "/messages", params={"limit": 20})
    call("preflight", "post", conv + "/preflight", {"context_window": 128000})
    call("turn", "post", conv + "/turns", {"content": "Where do I live now?", "sender": "ana", "trust": "operator"})
    call("commit", "post", conv + "/commit", {"trust": "operator", "peak_prompt_tokens": 1840})
    call("prompt", "get", "/agents/main/prompt", params={"conversation": CONV})
    call("tool_definitions", "get", "/agents/main/tools", params={"format": "openai"})
    tool = {"conversation": CONV, "trust": "operator"}
    call("memory_store", "post", "/agents/main/tools/memory_store", {**tool, "arguments": {
        "key": "home_city", "value": "lives in Porto", "category": "identity"}})
    call("memory_recall", "post", "/agents/main/tools/memory_recall", {**tool, "arguments": {
        "query": "where does the user live", "scope": "owner"}})
    call("memory_sources_list", "post", "/agents/main/tools/memory_sources_list", {**tool, "arguments": {}})
    call("conversations", "get", "/agents/main/conversations", params={"limit": 20})

    added = call("memory_add", "post", "/agents/main/memories", {
        "key": "tea", "value": "likes green tea in the afternoon", "category": "preference",
        "reason": "told me on the phone"}, key="ops")["memory"]
    call("memory_edit", "patch", f"/memories/{added['id']}", {
        "value": "likes green tea, no sugar", "reason": "corrected: no sugar"}, key="ops")
    call("memory_detail", "get", f"/memories/{added['id']}")
    call("memories", "get", "/agents/main/memories", params={"q": "tea"})
    call("memory_forget", "post", "/agents/main/tools/memory_forget", {**tool, "arguments": {
        "id": added["id"], "reason": "the user stopped drinking tea"}})
    call("restore", "post", f"/memories/{added['id']}/restore", key="ops")
    call("archive", "post", f"/memories/{added['id']}/archive", {"reason": "outdated"}, key="ops")

    call("review", "post", "/agents/main/review", {"conversation": CONV}, key="ops")
    runs = call("review_runs", "get", "/agents/main/review-runs", params={"conversation": CONV})["runs"]
    call("review_undo", "post", f"/review-runs/{runs[0]['id']}/undo", key="ops")
    call("append_message", "post", conv + "/messages",
         {"role": "user", "content": "Please answer in Portuguese when I write in Portuguese.", "trust": "operator"})
    call("review", "post", "/agents/main/review", {"conversation": CONV}, key="ops")
    pending = call("memories", "get", "/agents/main/memories", params={"state": "pending"})["memories"]
    language, tone = sorted(pending, key=lambda row: row["key"])
    call("approve", "post", f"/memories/{language['id']}/approve", {"reason": "yes, please"}, key="ops")
    call("reject", "post", f"/memories/{tone['id']}/reject", {"reason": "too loud"}, key="ops")
    call("memory_sources", "get", "/agents/main/memory-sources")
    call("transcript", "post", "/agents/main/realtime/transcripts",
         {"device_id": "kitchen-speaker", "role": "user", "text": "Remind me to water the plants."})

    call("resources", "get", "/agents/main/resources")
    call("revisions", "get", "/agents/main/resources/user_md/revisions", params={"limit": 5})
    call("revision", "get", "/agents/main/resources/user_md/revisions/2")
    call("diff", "get", "/agents/main/resources/user_md/diff", params={"a": 1, "b": 2})
    call("rollback", "post", "/agents/main/resources/user_md/rollback", {"revision": 1}, key="ops")
    token = call("soul_proposal", "post", "/agents/main/soul/proposals",
                 {"mode": "suggest", "instruction": "Answer more briefly.", "trust": "operator"})["token"]
    call("soul_proposal_apply", "post", f"/agents/main/soul/proposals/{token}/apply", {"trust": "operator"})
    token = call("soul_proposal", "post", "/agents/main/soul/proposals",
                 {"mode": "suggest", "instruction": "Use more emoji.", "trust": "operator"})["token"]
    call("soul_proposal_deny", "post", f"/agents/main/soul/proposals/{token}/deny", {"trust": "operator"})

    job = call("job_create", "post", "/agents/main/jobs", {
        "name": "morning-digest", "prompt": "Summarise what I asked you to remember yesterday.",
        "schedule_type": "cron", "cron": "0 7 * * *"}, key="ops")
    jobs = f"/agents/main/jobs/{job['id']}"
    call("jobs", "get", "/agents/main/jobs")
    call("job", "get", jobs)
    call("job_update", "patch", jobs, {"enabled": False}, key="ops")
    call("job_run", "post", jobs + "/run", key="ops", params={"wait": "true"})
    call("job_runs", "get", jobs + "/runs")
    call("job_delete", "delete", jobs, key="ops")

    call("compact", "post", conv + "/compact", {"trust": "operator"})
    call("clear", "post", conv + "/clear", {"trust": "operator"})


def main() -> None:
    with FakeProvider() as provider, tempfile.TemporaryDirectory() as folder:
        provider.responder = model
        config = provider_config_toml(provider, context_window=128000) + MEMORY
        server = LiveServer(Path(folder) / "home", config=config)
        server.start()
        try:
            server.manage("fermix_setup", "--noinput")
            keys = {"ops": server.key("ops", "operator"), "bot": server.key("dm-bot", "channel",
                                                                            "--may-assert-operator")}
            call = Recorder(server, keys)
            day(call)
        finally:
            server.stop()
    OUT.write_text(json.dumps(call.examples, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(call.examples)} operations written to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
