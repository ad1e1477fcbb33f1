"""The reviewer: its own cost with the model's time taken out, and review throughput on a real cluster.

Overhead: `review_conversation` in this process against the fake model on loopback (answering at once
with one new fact), back to back over conversations never reviewed before, as a worker runs them; the
time spent inside the model call (`memory.reviewer.chat`, wrapped) is subtracted. Measured against its
absolute budget only.

Throughput: N conversations with new messages, one background review task each, a django-q2 cluster
with 2 workers and the model answering after 100 ms, embeddings off (the data set has no vectors, and
its backlog would hold a worker). Ideal = N × 100 ms / 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.dataset import MAIN_AGENT
from bench.django_env import raw_connect, stop_group
from bench.report import Figure, against_budget
from bench.timing import Stopwatch

ROOT = Path(__file__).resolve().parent.parent
MODEL_DELAY_S = 0.1
OVERHEAD_MS = 40
WARM = 5


def _answer(delay: float):
    from tests.fakeprovider import Reply

    def answer(request) -> Reply:
        # A fact that shares no more than its verb with the others: none is a duplicate of another.
        tag = uuid.uuid4().hex[:8]
        return Reply(text=json.dumps({"operations": [
            {"op": "add", "category": "interest", "key": f"bench_{tag}", "value": f"enjoys {tag}"}]}), delay=delay)

    return answer


def start_model(home: str, delay: float, extra: str = ""):
    """The fake model on loopback, written into `$FERMIX_HOME/config.toml` for every process."""
    from fermix_site.conf import conf
    from tests.fakeprovider import FakeProvider, provider_config_toml

    fake = FakeProvider().start()
    fake.responder = _answer(delay)
    (Path(home) / "config.toml").write_text(
        provider_config_toml(fake) + "\n[fermix_core.memory]\nreview_interval_hours = 24\n" + extra)
    conf.reload()
    return fake


def stop_model(fake, home: str) -> None:
    from fermix_site.conf import conf

    fake.stop()
    (Path(home) / "config.toml").unlink(missing_ok=True)
    conf.reload()


def unreviewed(agent: str, n: int) -> list[str]:
    """`n` conversations of `agent` with messages to review and no review yet."""
    from memory.models import ReviewState
    from memory.reviewer import conversations_with_new_messages

    reviewed = set(ReviewState.objects.filter(agent_id=agent).values_list("conversation_key", flat=True))
    return [key for key in conversations_with_new_messages(agent_id=agent) if key not in reviewed][:n]


# --- overhead ----------------------------------------------------------------------------------------


def measure_overhead(data, count: int) -> list[Figure]:
    from django.db import connection

    from memory import reviewer

    fake = start_model(data.home, delay=0)
    keys = unreviewed(MAIN_AGENT, count + WARM)
    in_model = Stopwatch()
    chat = reviewer.chat

    def timed_chat(**kwargs):
        with in_model:
            return chat(**kwargs)

    reviewer.chat = timed_chat
    service, statuses = Stopwatch(), []
    try:
        for index, key in enumerate(keys):
            calls, total = len(in_model.wall), Stopwatch()
            with total:
                result = reviewer.review_conversation(agent_id=MAIN_AGENT, conversation=key, force=True)
            statuses.append(result["status"])
            if index >= WARM and len(in_model.wall) == calls + 1:  # the first few warm the process up
                service.add(total.wall[0] - in_model.wall[-1], total.cpu[0] - in_model.cpu[-1])
    finally:
        reviewer.chat = chat
        stop_model(fake, data.home)
        connection.close()
    if not service.wall:
        raise RuntimeError("no review called the model through memory.reviewer.chat: its time cannot be taken out")
    return [against_budget("reviewer overhead, model time excluded", service, OVERHEAD_MS,
                           f"first reviews of conversations of the agent whose owner has {data.main_owner_rows:,} "
                           f"rows; {statuses.count('ok')} of {len(statuses)} applied one new fact and rebuilt the "
                           f"prompt files; {len(service.wall)} timed after {WARM} to warm up")]


# --- throughput on the cluster -----------------------------------------------------------------------


def _cluster(home: str) -> subprocess.Popen:
    env = {**os.environ, "FERMIX_HOME": home, "FERMIX_WORKERS": "2", "DJANGO_SETTINGS_MODULE": "fermix_site.settings",
           "FERMIX_LOG_LEVEL": "WARNING"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    log = open(Path(home) / "cluster.log", "ab")  # noqa: SIM115 (the child keeps it)
    return subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _finished(conn, group: str) -> list[tuple]:
    return conn.execute('SELECT success, stopped FROM django_q_task WHERE "group" = ?', (group,)).fetchall()


def measure_throughput(data, count: int) -> list[Figure]:
    from django.db import connection
    from django.db.models import Count
    from django_q.tasks import async_task

    from memory.models import ReviewRun

    agent = data.agents[1]
    # Reviews only: the data set's 100,000 messages have no vectors, and that backlog's embedding pass
    # would hold one of the two workers for the whole run.
    fake = start_model(data.home, delay=MODEL_DELAY_S, extra='[fermix_core.embeddings]\nbackend = "none"\n')
    keys = unreviewed(agent, count + 2)
    warm, keys = keys[:2], keys[2:]
    cluster = _cluster(data.home)
    raw = raw_connect(data.db)
    try:
        group = f"bench-{uuid.uuid4().hex[:8]}"
        for key in warm:  # the cluster is up and its workers have imported everything
            async_task("memory.tasks.review_conversation_task", agent, key, group=group + "-warm")
        _wait(raw, group + "-warm", len(warm), timeout=120)
        start = time.monotonic()
        for key in keys:
            async_task("memory.tasks.review_conversation_task", agent, key, group=group)
        enqueued = time.monotonic() - start
        done = _wait(raw, group, len(keys), timeout=max(120, count * 2))
        elapsed = time.monotonic() - start
    finally:
        stop_group(cluster)
        stop_model(fake, data.home)
        raw.close()
        connection.close()
    ideal = count * MODEL_DELAY_S / 2
    runs = dict(ReviewRun.objects.filter(agent_id=agent, conversation_key__in=keys).values("status")
                .annotate(n=Count("id")).values_list("status", "n"))
    return [Figure("review throughput, 2 workers, 100 ms model", f"{count / elapsed:.1f} reviews/s ({elapsed:.1f} s)",
                   "within 2× of ideal", elapsed <= 2 * ideal and len(done) == count,
                   f"ideal {count / ideal:.1f} reviews/s ({ideal:.1f} s)", f"{elapsed / ideal:.2f}× ideal time",
                   f"{count} conversations with new messages, one background task each on the ORM broker (enqueued "
                   f"in {enqueued:.2f} s); {len(done)} tasks done; review runs by status: {runs}; the model answered "
                   f"{len(fake.requests)} calls")]


def _wait(conn, group: str, count: int, timeout: float) -> list[tuple]:
    deadline = time.monotonic() + timeout
    done = _finished(conn, group)
    while len(done) < count and time.monotonic() < deadline:
        time.sleep(0.05)
        done = _finished(conn, group)
    return done
