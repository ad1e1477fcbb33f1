"""The storage primitives through the service, each beside the same storage work done with raw sqlite3
in the same run (`bench.raw`): message ingest, window reads, full-text queries and the atomic write of a
prompt file; and ingest with `[fermix_core.storage] durability = "full"` beside the default.

Both sides get the same inputs: messages for the same conversations, picked in proportion to each
conversation's size, the same query texts, the same file content. Service and raw runs alternate in
blocks, so load from other processes on the machine falls on both alike.
"""

from __future__ import annotations

import random

from bench import raw
from bench.dataset import MAIN_AGENT, conversation_sample, sample_messages, sample_texts
from bench.django_env import raw_connect
from bench.report import Figure, against_raw, ms
from bench.timing import Stopwatch

BLOCKS = 20
WARM = 10
INGEST_SHARE = 0.4  # of raw sqlite3's rate
EMBEDDED_SHARE = 0.9  # ingest with embeddings on, of off
WINDOW_MS = 2
SEARCH_MS = 20


def measure_ingest(data, count: int, state: dict) -> list[Figure]:
    """`message_append` beside `raw.append`; the raw rate goes into `state` for the HTTP family."""
    from django.db import connection

    from memory.conversations import message_append

    messages = sample_messages(data, count + 100, seed=11)
    warm, messages = messages[:100], messages[100:]
    conn = raw_connect(data.db)
    for message in warm[:50]:
        message_append(**message)
    for message in warm[50:]:
        raw.append(conn, message)
    service, baseline = Stopwatch(), Stopwatch()
    size = len(messages) // BLOCKS
    for block in range(BLOCKS):
        part = messages[block * size:(block + 1) * size]
        for message in part:
            with service:
                message_append(**message)
        for message in part:
            with baseline:
                raw.append(conn, message)
    conn.close()
    connection.close()
    rate, raw_rate = 1000 / service.mean(), 1000 / baseline.mean()
    state["raw_rate"] = raw_rate
    return [
        Figure("message ingest (`message_append`)", f"{rate:,.0f} msg/s", f"≥ {INGEST_SHARE * 100:.0f} % of raw",
               rate / raw_rate >= INGEST_SHARE, f"{raw_rate:,.0f} msg/s", f"{rate / raw_rate:.0%} of raw",
               f"{len(service.wall):,} messages, one transaction each, in {BLOCKS} blocks alternating with raw; "
               f"p50 {ms(service.p(0.5))} ms, p95 {ms(service.p())} ms (raw {ms(baseline.p(0.5))} / "
               f"{ms(baseline.p())} ms); CPU per message {service.mean(cpu=True):.3f} ms (raw "
               f"{baseline.mean(cpu=True):.3f} ms, {baseline.mean(cpu=True) / service.mean(cpu=True):.0%} of raw)"),
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
    normal, full = (1000 / watches[d].mean() for d in ("normal", "full"))
    return [
        Figure('message ingest, `durability = "full"` (synchronous FULL)', f"{full:,.0f} msg/s", "", None,
               f'"normal": {normal:,.0f} msg/s', f"{full / normal:.0%} of normal",
               f"{len(watches['full'].wall):,} messages each, one transaction each, in {BLOCKS} alternating blocks; "
               f"p50 / p95 {ms(watches['full'].p(0.5))} / {ms(watches['full'].p())} ms (normal "
               f"{ms(watches['normal'].p(0.5))} / {ms(watches['normal'].p())} ms); the database on "
               f"{_filesystem(data.db)}"),
    ]


def measure_embedding_cost(data, count: int) -> list[Figure]:
    """`message_append` with the default embedding backend (`local`: each append asks for an embedding
    pass, at most once a second) beside `backend = "none"`, in alternating blocks: what semantic recall
    costs the request path. The embedding itself runs in the cluster, which this process does not run."""
    import os

    from fermix_site.conf import conf
    from memory import embeddings
    from memory.conversations import message_append

    messages = sample_messages(data, count, seed=19)
    watches = {"local": Stopwatch(), "none": Stopwatch()}
    size = len(messages) // BLOCKS
    before = os.environ.get("FERMIX_EMBEDDINGS_BACKEND")
    try:
        for block in range(BLOCKS):
            backend = ("local", "none")[block % 2]
            os.environ["FERMIX_EMBEDDINGS_BACKEND"] = backend
            conf.reload()
            embeddings.embedder()  # built once per process in service; here again after each switch, untimed
            for message in messages[block * size:(block + 1) * size]:
                with watches[backend]:
                    message_append(**message)
    finally:
        if before is None:
            os.environ.pop("FERMIX_EMBEDDINGS_BACKEND", None)
        else:
            os.environ["FERMIX_EMBEDDINGS_BACKEND"] = before
        conf.reload()
    on, off = (1000 / watches[b].mean() for b in ("local", "none"))
    return [Figure("message ingest with embeddings on (`local`)", f"{on:,.0f} msg/s", f"≥ {EMBEDDED_SHARE:.0%} of off",
                   on / off >= EMBEDDED_SHARE, f'"none": {off:,.0f} msg/s', f"{on / off:.0%} of off",
                   f"{len(watches['local'].wall):,} messages each way in {BLOCKS} alternating blocks; p50 / p95 "
                   f"{ms(watches['local'].p(0.5))} / {ms(watches['local'].p())} ms (off "
                   f"{ms(watches['none'].p(0.5))} / {ms(watches['none'].p())} ms)")]


def measure_window(data, reads: int) -> list[Figure]:
    """`window_read` cached (a read right after a read) and uncached (every process cache emptied),
    beside `raw.window`."""
    from django.db import connection

    from fermix_site import generations
    from memory.conversations import window_read

    picks = [(c[0], c[1]) for c in conversation_sample(data, reads, seed=13)]
    conn = raw_connect(data.db)
    sizes = [len(raw.window(conn, agent, key)) for agent, key in picks]
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
            raw.window(conn, agent, key)
    conn.close()
    connection.close()
    shape = (f"windows of {min(sizes)}-{max(sizes)} messages (mean {sum(sizes) / len(sizes):.0f}), conversations "
             "picked in proportion to their size")
    return [against_raw("window read, cached (generation check)", hot, baseline, WINDOW_MS, shape),
            against_raw("window read, uncached (built from the database)", cold, baseline, WINDOW_MS,
                        "raw: the conversation row, the window's rows and the checkpoint, fetched as tuples")]


def _query(rng: random.Random, text: str, stop_words: frozenset) -> str:
    """Two to four content words of a message, as a model's keywords for it."""
    words = [w for w in text.lower().split() if w not in stop_words] or text.split()
    return " ".join(rng.sample(words, min(len(words), rng.randint(2, 4))))


def measure_search(data, count: int) -> list[Figure]:
    """`search_messages` over the agent's history and `search_memories` over one owner's rows, beside the
    plain FTS5 query of the same text (`raw.fts_messages`, `raw.fts_memories`)."""
    from django.db import connection

    from memory.search import search_memories, search_messages
    from memory.search.text import STOP_WORDS

    rng = random.Random(23)
    picks = [(owner, _query(rng, text, STOP_WORDS)) for owner, text in sample_texts(data, MAIN_AGENT, count + WARM, 19)]
    conn = raw_connect(data.db)
    watches = {name: (Stopwatch(), Stopwatch()) for name in ("messages", "memories")}
    for index, (owner, query) in enumerate(picks):
        owned = {"agent_id": MAIN_AGENT, "owner_id": owner}
        sides = (("messages", search_messages, {"agent_id": MAIN_AGENT}, raw.fts_messages, {"agent_id": MAIN_AGENT}),
                 ("memories", search_memories, {**owned, "archived_at__isnull": True}, raw.fts_memories, owned))
        for name, service, filters, plain, plain_filters in sides:
            if index < WARM:
                service(query=query, filters=filters, limit=20)
                plain(conn, query, plain_filters, 20)
                continue
            with watches[name][0]:
                service(query=query, filters=filters, limit=20)
            with watches[name][1]:
                plain(conn, query, plain_filters, 20)
    conn.close()
    connection.close()
    queries = "2-4 content words of a random message of the agent"
    return [
        against_raw("full-text search of history (`search_messages`), the agent's messages", *watches["messages"],
                    SEARCH_MS, f"{queries}; raw: FTS5 MATCH of every word OR-ed, joined to the agent, "
                    "ORDER BY bm25 LIMIT 20"),
        against_raw("full-text search of memory rows (`search_memories`), one owner", *watches["memories"],
                    SEARCH_MS, f"{queries}, in that message's owner's rows; raw: the same plain query of the "
                    "memories mirror"),
    ]


def measure_file_write(data, count: int) -> list[Figure]:
    """`resources.files.write_atomic` of the rendered USER.md beside `raw.file_write` of the same bytes
    into the same folder, alternating."""
    from resources.files import resource_file_path, write_atomic

    content = resource_file_path(agent_id=MAIN_AGENT, resource_type="user_md").read_bytes()
    target = resource_file_path(agent_id="filebench", resource_type="user_md")
    target.parent.mkdir(parents=True, exist_ok=True)
    plain_target = target.with_name("USER.raw.md")
    service, baseline = Stopwatch(), Stopwatch()
    sides = ((service, lambda: write_atomic(target, content)),
             (baseline, lambda: raw.file_write(plain_target, content)))
    for index in range(count + WARM):
        for watch, write in sides if index % 2 else sides[::-1]:
            if index < WARM:
                write()
                continue
            with watch:
                write()
    return [against_raw("prompt-file write (`write_atomic`: temp file, fsync, rename, fsync of the folder)", service,
                        baseline, None, f"the rendered USER.md of `main` ({len(content) / 1024:.1f} KiB); raw: the "
                        f"same bytes, open/write/fsync/rename/fsync of the folder; on {_filesystem(target)}")]
