"""Several nodes with no shared filesystem: PostgreSQL and Redis are the only shared state.

Two web nodes (`manage.py serve`, each with its own FERMIX_HOME and port) and one worker-only node
(`manage.py qcluster`), started with the commands and environment of the systemd units in deploy/, and
spoken to with the headers deploy/nginx.conf sets. A Redis server of the test's own (so stopping it
disturbs nothing else) and the fake model provider on loopback. The story: a bot appends and commits
through node A, the review runs wherever the cluster runs it, node B's prompt and mirror show the fact;
a rollback through B shows on A; a hand edit of SOUL.md on B is recorded once; SIGKILL of node A under
load loses no acknowledged message; Redis stopped and started again: requests keep working and the
review asked for meanwhile runs; `systemctl stop` ends each node on its stop signal, with nothing left.
"""

import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from memory.models import Message, ReviewRun
from resources.models import ResourceRevision
from tests import units
from tests.api.model_script import Script
from tests.api.test_story import reviewer, wait_for
from tests.conftest import ROOT, process_env, run_manage
from tests.fakeprovider import provider_config_toml, unused_port, use_config

if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
    pytest.skip("several nodes share PostgreSQL: this test runs in the PostgreSQL pass of `make test`",
                allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CONV = "/agents/main/conversations/telegram:77"
HEARTBEAT_S = 2  # [fermix_core.mirrors] interval_s on every node of this test
# A bound for a broken run only: a few heartbeats and a review on a loaded machine.
SOON = HEARTBEAT_S * 5 + 60


def env_file() -> dict:
    lines = (units.DEPLOY / "fermix.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def proxy_headers() -> dict:
    """What deploy/nginx.conf sets on every request it passes to a node, for a client on https."""
    values = {"$host": "127.0.0.1", "$scheme": "https", "$proxy_add_x_forwarded_for": "203.0.113.9"}
    headers = {}
    for name, value in re.findall(r"proxy_set_header\s+(\S+)\s+(\S+);", (units.DEPLOY / "nginx.conf").read_text()):
        value = value.strip('"')
        if value:
            headers[name] = values.get(value, value)
    return headers


class Redis:
    def __init__(self, folder: Path):
        self.port, self.folder, self.process = unused_port(), folder, None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        self.process = subprocess.Popen(
            [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("redis", lambda: subprocess.run(
            [shutil.which("redis-cli"), "-p", str(self.port), "ping"], capture_output=True, text=True
        ).stdout.strip() == "PONG", timeout=30)

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


class Node:
    def __init__(self, name: str, home: Path, env: dict, unit: str):
        self.name, self.home, self.env, self.unit = name, home, env, unit
        self.process = None
        self.log = home / "node.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.env['FERMIX_PORT']}"

    def start(self):
        self.process = subprocess.Popen(units.unit_command(self.unit), cwd=ROOT, env=self.env,
                                        stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> units.Stopped | None:
        """As `systemctl stop` stops the node's unit."""
        return units.stop(self.process, self.unit) if self.alive() else None

    def kill(self):
        os.killpg(self.process.pid, signal.SIGKILL)  # serve, gunicorn and its workers, the cluster
        self.process.wait()

    def mirror(self, relative: str) -> str:
        path = self.home / relative
        return path.read_text() if path.exists() else ""


class Api:
    def __init__(self, node: Node, key: str):
        self.http = httpx.Client(base_url=node.base + "/api/v1", timeout=60,
                                 headers={**proxy_headers(), "Authorization": f"Bearer {key}"})

    def ok(self, method, path, body=None, **params):
        kwargs = {"params": params}
        if method == "post":
            kwargs["json"] = {} if body is None else body
        response = getattr(self.http, method)(path, **kwargs)
        assert response.status_code < 300, (path, response.status_code, response.text)
        return response.json()


@pytest.fixture
def cluster(home, fake_provider, tmp_path):
    script = Script()
    script.defaults["reviewer"] = reviewer
    fake_provider.responder = script
    redis = Redis(tmp_path)
    redis.start()
    config = provider_config_toml(fake_provider, context_window=8192)
    nodes = []
    with use_config(config):
        shared = {**env_file(), **process_env(REDIS_URL=redis.url)}
        shared.update(FERMIX_BIND="127.0.0.1", FERMIX_ALLOWED_HOSTS="127.0.0.1", FERMIX_MIRRORS_INTERVAL_S=HEARTBEAT_S,
                      FERMIX_WEB_WORKERS=1, FERMIX_WORKERS=1, FERMIX_WEB_THREADS=8,
                      # every commit's review runs (none waits out an interval); vectors are not this test's
                      FERMIX_MEMORY_REVIEW_INTERVAL_HOURS="0.0001", FERMIX_EMBEDDINGS_BACKEND="none")
        for name, unit in (("a", "fermix-web.service"), ("b", "fermix-web.service"), ("c", "fermix-worker.service")):
            node_home = tmp_path / f"node-{name}"
            node_home.mkdir()
            (node_home / "config.toml").write_text(config)
            env = {**shared, **units.unit_environment(unit), "FERMIX_HOME": str(node_home), "FERMIX_NODE_NAME": name,
                   "FERMIX_PORT": str(unused_port()), "FERMIX_WEB_WORKERS": "1", "FERMIX_WORKERS": "1"}
            env = {k: str(v) for k, v in env.items()}
            nodes.append(Node(name, node_home, env, unit))
        a, b, c = nodes
        for command in ("migrate", "fermix_setup"):  # deploy/fermix-setup.service, on one node
            done = run_manage(command, "--noinput", env=a.env)
            assert done.returncode == 0, done.stderr
        keys = {}
        for name, role, *flags in (("ops", "operator"), ("bot", "channel", "--may-assert-operator")):
            created = run_manage("apikey_create", "--name", name, "--role", role, *flags, env=a.env)
            assert created.returncode == 0, created.stderr
            keys[role] = created.stdout.strip()
        for node in nodes:
            node.start()
        try:
            for node in (a, b):
                wait_for(f"node {node.name}", lambda n=node: httpx.get(n.base + "/healthz", headers=proxy_headers())
                         .json()["worker"]["state"] == "alive", timeout=180)
            yield a, b, c, keys, redis
        finally:
            stop_all(nodes, redis)


def stop_all(nodes: list[Node], redis: Redis) -> None:
    """Every node stopped as its unit is, then Redis; no node's log may hold a traceback of ours."""
    for node in nodes:
        node.stop()
    redis.stop()
    for node in nodes:
        output = node.log.read_text() if node.log.exists() else ""
        assert not unexpected_tracebacks(output), f"node {node.name}:\n{output[-5000:]}"


def unexpected_tracebacks(output: str) -> list[str]:
    """Tracebacks in a node's log other than django-q2's own while Redis was stopped (its pusher logs
    each failed pull with one, and is started again)."""
    lines = output.splitlines()
    return [lines[i - 1] if i else "" for i, line in enumerate(lines) if line.startswith("Traceback")
            and not (i and "Failed to pull task from broker" in lines[i - 1])]


def reviews_finished():
    return ReviewRun.objects.exclude(finished_at=None).count()


def test_two_web_nodes_and_a_worker_share_only_the_database_and_redis(cluster):
    a, b, c, keys, redis = cluster
    bot_a, bot_b, ops_b = Api(a, keys["channel"]), Api(b, keys["channel"]), Api(b, keys["operator"])
    user_md = "memory/main/USER.md"

    # A plain request without the proxy's headers is sent to https: the units run behind the proxy.
    assert httpx.get(a.base + "/api/v1/agents/main/prompt").status_code == 301

    # Node B starts with the bootstrap files node A's set-up put in the database, mirrored by its heartbeat.
    wait_for("B's SOUL.md mirror", lambda: b.mirror("bootstrap/main/SOUL.md") == a.mirror("bootstrap/main/SOUL.md")
             != "", timeout=SOON)

    # A bot appends and commits through node A; the review runs on whichever cluster takes it.
    bot_a.ok("post", CONV + "/messages", {"role": "user", "content": "I prefer short answers.", "trust": "operator"})
    assert bot_a.ok("post", CONV + "/commit", {"trust": "operator", "peak_prompt_tokens": 100})["review"] == "queued"
    wait_for("the first review", lambda: reviews_finished() == 1, timeout=SOON)
    wait_for("USER.md's first revision", lambda: ResourceRevision.objects.filter(resource_type="user_md").exists())
    assert "prefers short answers" in str(bot_b.ok("get", "/agents/main/prompt", trust="operator"))
    wait_for("B's USER.md mirror", lambda: "prefers short answers" in b.mirror(user_md), timeout=SOON)

    bot_a.ok("post", CONV + "/messages", {"role": "user", "content": "I am vegetarian.", "trust": "operator"})
    Api(a, keys["operator"]).ok("post", "/agents/main/review", {"conversation": "telegram:77"})  # now, on node A
    assert "is vegetarian" in str(bot_b.ok("get", "/agents/main/prompt", trust="operator"))

    # A rollback through node B shows on node A: its prompt at once, its mirror within a heartbeat.
    first = min(ResourceRevision.objects.filter(resource_type="user_md").values_list("revision", flat=True))
    ops_b.ok("post", "/agents/main/resources/user_md/rollback", {"revision": first})
    assert "is vegetarian" not in str(bot_a.ok("get", "/agents/main/prompt", trust="operator"))
    wait_for("A's USER.md mirror rolled back", lambda: "prefers short answers" in a.mirror(user_md)
             and "vegetarian" not in a.mirror(user_md), timeout=SOON)

    # A hand edit of SOUL.md on node B is recorded once and reaches node A.
    soul = b.home / "bootstrap/main/SOUL.md"
    soul.write_text(soul.read_text() + "\nAnswer in rhymes.\n")
    wait_for("the hand edit recorded", lambda: ResourceRevision.objects.filter(
        resource_type="soul_md", mutation_source="manual_edit").exists(), timeout=SOON)
    wait_for("A's SOUL.md mirror", lambda: "Answer in rhymes." in a.mirror("bootstrap/main/SOUL.md"), timeout=SOON)
    assert "Answer in rhymes." in str(bot_a.ok("get", "/agents/main/prompt", trust="operator"))
    time.sleep(HEARTBEAT_S * 3)  # more heartbeats on every node find nothing new to record
    edits = ResourceRevision.objects.filter(resource_type="soul_md", mutation_source="manual_edit")
    assert [(e.provenance["node"], e.provenance["detected_during"]) for e in edits] in (
        [("b", "heartbeat")], [("b", "compose")])

    # SIGKILL of node A under load loses no acknowledged message.
    acknowledged, stop = [], threading.Event()

    def append_until_refused(worker):
        client = Api(a, keys["channel"])
        client.http.timeout = httpx.Timeout(10)
        while not stop.is_set():
            content = f"load {worker} {uuid.uuid4()}"
            try:
                response = client.http.post(f"/agents/main/conversations/telegram:9{worker}/messages",
                                            json={"role": "user", "content": content})
            except httpx.HTTPError:
                return
            if response.status_code == 201 or response.status_code == 200:
                acknowledged.append(content)

    appenders = [threading.Thread(target=append_until_refused, args=(n,)) for n in range(4)]
    for thread in appenders:
        thread.start()
    wait_for("appends under load", lambda: len(acknowledged) >= 40, timeout=SOON)
    a.kill()
    stop.set()
    for thread in appenders:
        thread.join(timeout=30)
    stored = set(Message.objects.filter(content__in=acknowledged).values_list("content", flat=True))
    assert len(acknowledged) >= 40 and set(acknowledged) == stored

    # Redis stopped: node B keeps answering; the review asked for meanwhile runs once Redis is back.
    redis.stop()
    bot_b.ok("post", CONV + "/messages", {"role": "user", "content": "I live in Porto.", "trust": "operator"})
    before = reviews_finished()
    assert bot_b.ok("post", CONV + "/commit", {"trust": "operator", "peak_prompt_tokens": 100})["review"] == "queued"
    assert "prefers short answers" in str(bot_b.ok("get", "/agents/main/prompt", trust="operator"))
    assert httpx.get(b.base + "/healthz", headers=proxy_headers()).status_code == 200
    redis.start()
    wait_for("the review asked for while Redis was down", lambda: reviews_finished() > before, timeout=SOON * 2)
    assert c.alive() and b.alive()

    # `systemctl stop`: each node ends on its stop signal, within its unit's time, leaving no process behind.
    for node in (b, c):
        stopped = node.stop()
        assert not stopped.timed_out and stopped.left == [], (node.name, stopped, node.log.read_text()[-3000:])
        assert "did not stop" not in node.log.read_text(), node.name
