"""The reviewer: its own cost with the model's time taken out, and review throughput on a real cluster.

Overhead: `review_conversation` in this process against the fake model on loopback (answering at once
with one new fact); the time spent inside the model call is measured and subtracted. Raw: the same
reads and writes in plain SQL (state, pending messages, claim, run, the rows shown to the model, both
files' usage, then one transaction for the operation, the row, its event, the run and the cursor),
followed by the same rebuild in plain SQL.

Throughput: N conversations with new messages, one background review task each, a django-q2 cluster
with 2 workers and the model answering after 100 ms. Ideal = N × 100 ms / 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.common import MAIN_AGENT, Figure, Stopwatch, db_now, latency, ms, raw_connect, stop_group
from bench.prompt import raw_rebuild, raw_render

ROOT = Path(__file__).resolve().parent.parent
MODEL_DELAY_S = 0.1


def _answer(delay: float):
    from tests.fakeprovider import Reply

    def answer(request) -> Reply:
        key = f"bench_{uuid.uuid4().hex[:8]}"
        return Reply(text=json.dumps({"operations": [
            {"op": "add", "category": "interest", "key": key, "value": f"enjoys benchmark {key}"}]}), delay=delay)

    return answer


def start_model(home: str, delay: float):
    """The fake model on loopback, written into `$FERMIX_HOME/config.toml` for every process."""
    from fermix_site.conf import conf
    from tests.fakeprovider import FakeProvider, provider_config_toml

    fake = FakeProvider().start()
    fake.responder = _answer(delay)
    (Path(home) / "config.toml").write_text(
        provider_config_toml(fake) + "\n[fermix_core.memory]\nreview_interval_hours = 24\n")
    conf.reload()
    return fake


def stop_model(fake, home: str) -> None:
    from fermix_site.conf import conf

    fake.stop()
    (Path(home) / "config.toml").unlink(missing_ok=True)
    conf.reload()


def unreviewed(data, agent: str, n: int) -> list[str]:
    """Conversations of `agent` with operator-sent messages and no review yet, busiest first."""
    conn = raw_connect(data.db)
    rows = conn.execute(
        "SELECT c.key FROM conversations c WHERE c.agent_id = ? AND NOT EXISTS (SELECT 1 FROM review_states s "
        "WHERE s.agent_id = c.agent_id AND s.conversation_key = c.key) AND EXISTS (SELECT 1 FROM messages m WHERE "
        "m.agent_id = c.agent_id AND m.channel = c.channel AND m.chat_id = c.chat_id AND m.thread_scope = "
        "c.thread_scope AND m.role = 'user' AND m.trust = 'operator' AND m.kind IN ('chat', 'voice_turn')) "
        "ORDER BY c.id LIMIT ?", (agent, n)).fetchall()
    conn.close()
    return [r[0] for r in rows]


# --- overhead ----------------------------------------------------------------------------------------


def raw_review(conn, home: str, agent: str, key: str, model) -> None:
    """review_conversation's reads and writes in plain SQL; `model(messages)` stands in for the call."""
    channel, chat_id, thread = key.split(":")
    now = db_now()
    conn.execute("INSERT INTO review_states (agent_id, conversation_key, cursor_message_id, claimed_by, status, "
                 "failure_count, last_error, updated_at) VALUES (?, ?, 0, '', '', 0, '', ?) "
                 "ON CONFLICT (agent_id, conversation_key) DO NOTHING", (agent, key, now))
    state_id, cursor = conn.execute("SELECT id, cursor_message_id FROM review_states WHERE agent_id = ? AND "
                                    "conversation_key = ?", (agent, key)).fetchone()
    pending = conn.execute(
        "SELECT id, content, created_at FROM messages WHERE agent_id = ? AND channel = ? AND chat_id = ? AND "
        "thread_scope = ? AND id > ? AND role = 'user' AND kind IN ('chat', 'voice_turn') AND trust != 'guest' "
        "ORDER BY id LIMIT 40", (agent, channel, chat_id, thread, cursor)).fetchall()
    token = uuid.uuid4().hex
    conn.execute("UPDATE review_states SET claimed_by = ?, status = 'running' WHERE id = ? AND claimed_by = ''",
                 (token, state_id))
    owner = conn.execute("SELECT owner_id FROM conversations WHERE agent_id = ? AND key = ?",
                         (agent, key)).fetchone()[0]
    run_id = conn.execute(
        "INSERT INTO review_runs (agent_id, conversation_key, owner_id, trigger, status, reason, input_message_ids, "
        "input_tokens, cursor_before, model_call_id, output, ops_added, ops_replaced, ops_archived, ops_skipped, "
        "started_at, undone_by) VALUES (?, ?, ?, 'background', 'running', '', ?, 0, ?, '', '', 0, 0, 0, 0, ?, '')",
        (agent, key, owner, json.dumps([p[0] for p in pending]), cursor, now)).lastrowid
    rows = conn.execute(
        "SELECT id, category, key, value FROM memories WHERE agent_id = ? AND owner_id = ? AND archived_at IS NULL "
        "AND scope_type IN ('owner', 'agent') AND category != '' ORDER BY updated_at DESC, id DESC LIMIT 120",
        (agent, owner)).fetchall()
    usage = {t: raw_render(conn, agent, t).tokens for t in ("user_md", "memory_md")}
    answer = model([{"rows": rows, "usage": usage, "messages": pending}])
    operation = json.loads(answer)["operations"][0]
    now = db_now()
    conn.execute("BEGIN IMMEDIATE")
    try:
        assert conn.execute("SELECT 1 FROM review_states WHERE id = ? AND claimed_by = ?", (state_id, token)).fetchone()
        conn.execute("INSERT INTO memory_sources (agent_id, source_type, key, name, description, created_at) VALUES "
                     "(?, 'conversation', ?, ?, '', ?) ON CONFLICT (agent_id, key) DO NOTHING",
                     (agent, f"conversation:{key}", key, now))
        source_id = conn.execute("SELECT id FROM memory_sources WHERE agent_id = ? AND key = ?",
                                 (agent, f"conversation:{key}")).fetchone()[0]
        conn.execute("SELECT id FROM memories WHERE agent_id = ? AND owner_id = ? AND scope_type = 'owner' AND "
                     "scope_id = ? AND key = ?", (agent, owner, owner, operation["key"])).fetchone()
        memory_id = conn.execute(
            "INSERT INTO memories (agent_id, owner_id, scope_type, scope_id, category, key, value, confidence, "
            "promote_target, source_type, source_name, source_description, session_id, run_id, source_message_id, "
            "archived_by, archive_reason, created_at, updated_at, source_id) VALUES (?, ?, 'owner', ?, ?, ?, ?, 1.0, "
            "'user_md', 'conversation', ?, '', '', ?, ?, '', '', ?, ?, ?)",
            (agent, owner, owner, operation["category"], operation["key"], operation["value"], key, str(run_id),
             pending[-1][0], now, now, source_id)).lastrowid
        conn.execute("INSERT INTO memory_events (memory_id, action, after_value, before_category, after_category, "
                     "actor_type, actor_id, reason, created_at) VALUES (?, 'add', ?, '', ?, 'reviewer', ?, ?, ?)",
                     (memory_id, operation["value"], operation["category"], f"run:{run_id}",
                      f"review run {run_id}", now))
        conn.execute("INSERT INTO cache_generations (name, value) VALUES (?, 1) ON CONFLICT (name) DO UPDATE "
                     "SET value = cache_generations.value + 1", (f"memories:{agent}",))
        conn.execute("INSERT INTO review_operations (\"index\", op, status, reason, action, proposed, before_category, "
                     "after_value, memory_id, run_id) VALUES (0, 'add', 'applied', '', 'add', ?, '', ?, ?, ?)",
                     (json.dumps(operation), operation["value"], memory_id, run_id))
        conn.execute("UPDATE review_runs SET status = 'ok', ops_added = 1, cursor_after = ?, finished_at = ?, "
                     "output = ? WHERE id = ?", (pending[-1][0], now, answer, run_id))
        conn.execute("UPDATE review_states SET cursor_message_id = ?, last_reviewed_at = ?, claimed_by = '', "
                     "status = 'ok', failure_count = 0, last_error = '', updated_at = ? WHERE id = ?",
                     (pending[-1][0], now, now, state_id))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    raw_rebuild(conn, home, agent)


def measure_overhead(data, count: int) -> list[Figure]:
    from django.db import connection

    from memory import reviewer

    fake = start_model(data.home, delay=0)
    keys = unreviewed(data, MAIN_AGENT, 2 * count + 10)
    service_keys, raw_keys = keys[0:len(keys):2], keys[1:len(keys):2]
    in_model = Stopwatch()
    chat = reviewer.chat

    def timed_chat(**kwargs):
        with in_model:
            return chat(**kwargs)

    in_rebuild = Stopwatch()
    rebuild = reviewer.prompt_files_rebuild_after_commit

    def timed_rebuild(**kwargs):
        with in_rebuild:
            return rebuild(**kwargs)

    reviewer.chat, reviewer.prompt_files_rebuild_after_commit = timed_chat, timed_rebuild
    raw = raw_connect(data.db)
    in_raw_model = Stopwatch()

    def raw_model(messages):
        import httpx

        with in_raw_model:
            body = {"model": "primary-model",
                    "messages": [{"role": "user", "content": json.dumps(messages, default=str)}]}
            answer = httpx.post(fake.url + "/v1/chat/completions", json=body, timeout=30).json()
        return answer["choices"][0]["message"]["content"]

    service, baseline, statuses = Stopwatch(), Stopwatch(), []
    try:
        for index, (service_key, raw_key) in enumerate(zip(service_keys, raw_keys, strict=False)):
            total = Stopwatch()
            with total:
                result = reviewer.review_conversation(agent_id=MAIN_AGENT, conversation=service_key, force=True)
            statuses.append(result["status"])
            raw_total = Stopwatch()
            with raw_total:
                raw_review(raw, data.home, MAIN_AGENT, raw_key, raw_model)
            if index >= 5:  # the first few warm the process up
                service.add(total.wall[0] - in_model.wall[-1], total.cpu[0] - in_model.cpu[-1])
                baseline.add(raw_total.wall[0] - in_raw_model.wall[-1], raw_total.cpu[0] - in_raw_model.cpu[-1])
    finally:
        reviewer.chat, reviewer.prompt_files_rebuild_after_commit = chat, rebuild
        raw.close()
        stop_model(fake, data.home)
        connection.close()
    rebuilds = sorted(in_rebuild.wall[5:])
    return [latency("reviewer overhead, model time excluded", service, baseline, 20,
                    f"reviews of conversations of the agent whose owner has {data.main_owner_rows:,} rows, each "
                    f"followed by one raw review ({statuses.count('ok')} of {len(statuses)} applied one new fact "
                    f"and rebuilt the prompt files; the rebuild took p50 {ms(rebuilds[len(rebuilds) // 2])} ms of "
                    "it)")]


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
    from django_q.tasks import async_task

    agent = data.agents[1]
    fake = start_model(data.home, delay=MODEL_DELAY_S)
    keys = unreviewed(data, agent, count + 2)
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
    runs = dict(raw_connect(data.db).execute(
        f"SELECT status, count(*) FROM review_runs WHERE agent_id = ? AND conversation_key IN "
        f"({', '.join('?' * len(keys))}) GROUP BY status", (agent, *keys)).fetchall())
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
