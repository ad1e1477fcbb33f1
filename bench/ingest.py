"""Message ingest through the service and window reads, each beside the same work done with raw sqlite3;
ingest with `[fermix_core.storage] durability = "full"` beside the default.

Both sides get the same messages for the same conversations, picked in proportion to each
conversation's size (people write where they already talk). Service and raw runs alternate in blocks,
so load from other processes on the machine falls on both alike.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics

from bench.common import Figure, Stopwatch, Vocabulary, db_now, latency, ms, raw_connect, weighted_index

BLOCKS = 20


def conversation_sample(data, n: int, seed: int) -> list[tuple]:
    """`n` conversations (agent, key, owner, channel, chat_id, thread, id), each as likely as its share
    of the messages."""
    conn = raw_connect(data.db)
    sizes = {tuple(r[:4]): r[4] for r in conn.execute(
        "SELECT agent_id, channel, chat_id, thread_scope, count(*) FROM messages GROUP BY 1, 2, 3, 4")}
    rows = conn.execute("SELECT agent_id, key, owner_id, channel, chat_id, thread_scope, id FROM conversations "
                        "ORDER BY id").fetchall()
    conn.close()
    weights = list(itertools.accumulate(sizes.get((r[0], r[3], r[4], r[5]), 1) for r in rows))
    rng = random.Random(seed)
    return [rows[weighted_index(rng, weights)] for _ in range(n)]


def sample_messages(data, n: int, seed: int) -> list[dict]:
    rng, vocab = random.Random(seed), Vocabulary(seed=data.seed)
    return [{"agent_id": conv[0], "conversation": conv[1], "owner_id": conv[2], "role": "user",
             "content": vocab.sentence(rng), "trust": "operator", "sender": conv[2]}
            for conv in conversation_sample(data, n, seed)]


def raw_append(conn, message: dict) -> int:
    """What message_append writes, in plain SQL: the conversation row (created on first use), the
    message, and the conversation's cache generation, in one IMMEDIATE transaction."""
    agent, key = message["agent_id"], message["conversation"]
    channel, chat_id, thread = key.split(":")
    now = db_now()
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT id FROM conversations WHERE agent_id = ? AND key = ?", (agent, key)).fetchone() is None:
            conn.execute("INSERT INTO conversations (agent_id, key, channel, chat_id, thread_scope, owner_id, "
                         "window_start_id, created_at, updated_at, pinned_message_ids) VALUES (?,?,?,?,?,?,0,?,?,'[]')",
                         (agent, key, channel, chat_id, thread, message["owner_id"], now, now))
        cursor = conn.execute(
            "INSERT INTO messages (agent_id, owner_id, channel, chat_id, thread_scope, sender, role, kind, trust, "
            "content, metadata_json, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (agent, message["owner_id"], channel, chat_id, thread, message["sender"], message["role"], "chat",
             message["trust"], message["content"], json.dumps({}), now))
        conn.execute("INSERT INTO cache_generations (name, value) VALUES (?, 1) ON CONFLICT (name) DO UPDATE "
                     "SET value = cache_generations.value + 1 RETURNING value", (f"conv:{agent}:{key}",)).fetchone()
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return cursor.lastrowid


def measure_ingest(data, count: int) -> list[Figure]:
    from django.db import connection

    from memory.conversations import message_append

    messages = sample_messages(data, count + 100, seed=11)
    warm, messages = messages[:100], messages[100:]
    raw = raw_connect(data.db)
    for message in warm[:50]:
        message_append(**message)
    for message in warm[50:]:
        raw_append(raw, message)
    service, baseline = Stopwatch(), Stopwatch()
    size = len(messages) // BLOCKS
    for block in range(BLOCKS):
        part = messages[block * size:(block + 1) * size]
        for message in part:
            with service:
                message_append(**message)
        for message in part:
            with baseline:
                raw_append(raw, message)
    raw.close()
    connection.close()
    rate, raw_rate = 1000 / statistics.fmean(service.wall), 1000 / statistics.fmean(baseline.wall)
    cpu_share = statistics.fmean(baseline.cpu) / statistics.fmean(service.cpu)
    return [
        Figure("message ingest, service (`message_append`)", f"{rate:,.0f} msg/s", "≥ 50 % of raw",
               rate / raw_rate >= 0.5, f"{raw_rate:,.0f} msg/s", f"{rate / raw_rate:.0%} of raw",
               f"{len(service.wall):,} messages, one transaction each, in {BLOCKS} blocks alternating with raw; "
               f"p50 {ms(service.p(0.5))} ms, p95 {ms(service.p())} ms (raw {ms(baseline.p(0.5))} / "
               f"{ms(baseline.p())} ms); CPU per message {statistics.fmean(service.cpu):.3f} ms (raw "
               f"{statistics.fmean(baseline.cpu):.3f} ms, {cpu_share:.0%} of raw)"),
    ]


def _use_durability(durability: str) -> None:
    """Reconnect Django's connection as `[fermix_core.storage] durability = …` would configure it."""
    from django.db import connection

    from fermix_site.storage import SQLITE_SYNCHRONOUS, SYNCHRONOUS_LEVELS, sqlite_init_command

    connection.close()
    connection.settings_dict["OPTIONS"]["init_command"] = sqlite_init_command(durability)
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        assert SYNCHRONOUS_LEVELS[cursor.fetchone()[0]] == SQLITE_SYNCHRONOUS[durability]


def _filesystem(path) -> str:
    """The type and device of the filesystem holding `path` (what an fsync costs depends on it)."""
    best = ("", "unknown filesystem", "")
    try:
        with open("/proc/self/mounts") as mounts:
            for device, point, kind, *_ in (line.split() for line in mounts):
                if str(path).startswith(point.rstrip("/") + "/") and len(point) >= len(best[0]):
                    best = (point, kind, device)
    except OSError:
        pass
    return f"{best[1]} on {best[2]}" if best[2] else best[1]


def measure_durability(data, count: int) -> list[Figure]:
    """`message_append` with durability "normal" (the default) and "full", in alternating blocks."""
    from django.db import connection

    from memory.conversations import message_append

    messages = sample_messages(data, count, seed=17)
    watches = {"normal": Stopwatch(), "full": Stopwatch()}
    size = len(messages) // BLOCKS
    configured = connection.settings_dict["OPTIONS"]["init_command"]
    try:
        for block in range(BLOCKS):
            durability = ("normal", "full")[block % 2]
            _use_durability(durability)
            for message in messages[block * size:(block + 1) * size]:
                with watches[durability]:
                    message_append(**message)
    finally:
        connection.close()
        connection.settings_dict["OPTIONS"]["init_command"] = configured
    normal, full = (1000 / statistics.fmean(watches[d].wall) for d in ("normal", "full"))
    return [
        Figure('message ingest, `durability = "full"` (synchronous FULL)', f"{full:,.0f} msg/s", "", None,
               f'"normal": {normal:,.0f} msg/s', f"{full / normal:.0%} of normal",
               f"{len(watches['full'].wall):,} messages each, one transaction each, in {BLOCKS} alternating blocks; "
               f"p50 / p95 {ms(watches['full'].p(0.5))} / {ms(watches['full'].p())} ms (normal "
               f"{ms(watches['normal'].p(0.5))} / {ms(watches['normal'].p())} ms); the database on "
               f"{_filesystem(data.db)}"),
    ]


def raw_window(conn, agent: str, key: str) -> list[tuple]:
    """The current window in plain SQL, as the service reads it: the conversation row, then the messages
    from its window start on (by id) with the pinned messages and the checkpoint, put in time order."""
    channel, chat_id, thread = key.split(":")
    row = conn.execute("SELECT window_start_id, checkpoint_message_id, pinned_message_ids FROM conversations "
                       "WHERE agent_id = ? AND key = ?", (agent, key)).fetchone()
    if row is None:
        return []
    head = json.loads(row[2]) + ([row[1]] if row[1] else [])
    found = conn.execute(
        "SELECT * FROM messages WHERE (agent_id = ? AND channel = ? AND chat_id = ? AND thread_scope = ? AND id >= ? "
        "AND kind != 'checkpoint')" + (f" OR id IN ({', '.join('?' * len(head))})" if head else ""),
        (agent, channel, chat_id, thread, row[0], *head)).fetchall()
    window = sorted((m for m in found if m[0] >= row[0] and m[8] != "checkpoint"), key=lambda m: (m[12], m[0]))
    return [m for m in found if m[0] in head] + window


def measure_window(data, reads: int) -> list[Figure]:
    from django.db import connection

    from fermix_site import generations
    from memory.conversations import window_read

    picks = [(c[0], c[1]) for c in conversation_sample(data, reads, seed=13)]
    raw = raw_connect(data.db)
    sizes = [len(raw_window(raw, agent, key)) for agent, key in picks]
    hot, cold, baseline = Stopwatch(), Stopwatch(), Stopwatch()
    for agent, key in picks:
        window_read(agent_id=agent, conversation=key)  # in the cache, even past its 4,096 windows
        with hot:
            window_read(agent_id=agent, conversation=key)
    for agent, key in picks:
        generations.clear_all()
        with cold:
            window_read(agent_id=agent, conversation=key)
        with baseline:
            raw_window(raw, agent, key)
    raw.close()
    connection.close()
    shape = (f"windows of {min(sizes)}-{max(sizes)} messages (mean {sum(sizes) / len(sizes):.0f}), conversations "
             "picked in proportion to their size")
    return [latency("window read, cached (generation check)", hot, baseline, 2, shape),
            latency("window read, uncached (built from the database)", cold, baseline, 2,
                    "raw: the conversation row, the window's rows and the checkpoint, fetched as tuples")]
