"""How cost grows: the service's hot paths on worlds of growing size, SQLite or PostgreSQL.

    .venv/bin/python -m bench.scale --sizes 100000,1000000 --home /var/tmp/fermix-scale --json FILE
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fermix_scale .venv/bin/python -m bench.scale --postgres …
    … --reuse                 # measure again the worlds already built under --home
    … --modes lexical         # skip hybrid recall (no synthetic vectors, no approximate index)
    .venv/bin/python -m bench.scale --table A.json,B.json   # one table of saved runs, by size

Each size is measured in a process of its own (a fresh FERMIX_HOME `<home>/<vendor>-<size>`, fresh process
caches). The world is `bench.recall`'s (N messages over 5 agents, 2,000 owners and 6,000 Zipf-sized
conversations, N/20 memory rows, built with raw bulk inserts on SQLite and COPY on PostgreSQL); this module
adds a conversation row for each conversation with the window a compaction leaves (its newest 20–100
messages), so window reads read a window and not a whole history. PostgreSQL holds one world at a time:
a size is built over the previous one, and `--reuse` reuses it only when it has that size. Then, in the
same process, through the service's own functions:

- window read (`memory.conversations.window_read`) p95, cached (the second read) and uncached (every
  process cache emptied first with `fermix_site.generations.clear_all()`), conversations picked in
  proportion to their size;
- composed prompt (`memory.prompt.compose_system_prompt`) of `main`, cached and uncached;
- `memory_recall` p50 / p95 per mode, source and scope (three query classes: rare word, several words,
  question), and the statements one query runs. Hybrid writes `bench.recall`'s synthetic vectors (the
  evaluation's conversation embedded by the real model), builds the approximate indexes
  (`vector_index_rebuild`) and embeds each query with the real model, as in service; it runs twice, as a
  fresh worker meets the queries (each scope's first query reads its vectors into the process) and again
  with them held (`hybrid_warm`); the query embedding alone is timed too;
- ingest: `memory.conversations.message_append` of `--appends` messages into the built database, one
  transaction each (deleted again afterwards, so `--reuse` measures the same world);
- database size: SQLite's file with its WAL, PostgreSQL's `pg_database_size`, without the vectors (the
  bytes of `embeddings` and its indexes taken out) and with them, and per million messages; the index
  files under `cache/vectors`;
- the measuring process's peak resident memory and the bytes of its exact-search vector cache.

The 1-minute load average is recorded at each step: on a shared machine every latency is an upper bound.
No figure has a budget here; the budgets are in `bench.run` and `bench.recall`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.timing import Stopwatch

CLASSES = ("rare word", "several words", "question")
SOURCES = ("history", "memories")
SCOPES = ("current", "owner", "all")
MODES = ("lexical", "hybrid")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _p(watch: Stopwatch) -> dict:
    return {"p50": round(watch.p(0.5), 3), "p95": round(watch.p(), 3), "cpu_p95": round(watch.p(cpu=True), 3),
            "n": len(watch.wall)}


# --- the world ----------------------------------------------------------------------------------------


def _message_count() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM messages")
        return cursor.fetchone()[0]


def build(world, postgres: bool, reuse: bool) -> dict:
    """The world in the database (kept when `reuse` finds it there at this size) and its conversation rows."""
    from django.db import connection

    from bench import recall

    started = time.time()
    built = False
    if not (reuse and _message_count() == world.messages):
        print(f"building {world.messages:,} messages ({connection.vendor})", flush=True)
        if postgres:
            with connection.cursor() as cursor:
                cursor.execute("TRUNCATE conversations, embeddings RESTART IDENTITY CASCADE")
            recall.build_postgres(world)
        else:
            recall.build_sqlite(connection.settings_dict["NAME"], world)
        built = True
    seconds = time.time() - started
    _conversation_rows(world)
    if connection.vendor == "sqlite" and built:
        from memory import fts

        fts.optimize(connection)  # what the daily `fermix-search-index-optimize` schedule does
    _seed_files()
    return {"built": built, "build_s": round(seconds, 1), "total_s": round(time.time() - started, 1)}


def _conversation_rows(world) -> None:
    """A conversation row for each conversation of the world, its window the newest 20-100 messages (as
    compaction leaves them; no checkpoint summary)."""
    from django.db import connection

    from memory.models import Conversation

    if Conversation.objects.exists():
        return
    rng = random.Random(23)
    rows = []
    with connection.cursor() as cursor:
        for agent, owner, channel, chat, thread in world.conversations:
            cursor.execute("SELECT id FROM messages WHERE agent_id = %s AND channel = %s AND chat_id = %s AND "
                           "thread_scope = %s ORDER BY id DESC LIMIT %s",
                           [agent, channel, chat, thread, rng.randint(20, 100)])
            ids = [r[0] for r in cursor.fetchall()]
            if ids:
                rows.append(Conversation(agent_id=agent, key=f"{channel}:{chat}:{thread}", channel=channel,
                                         chat_id=chat, thread_scope=thread, owner_id=owner, window_start_id=ids[-1]))
    Conversation.objects.bulk_create(rows, batch_size=1000)


def _seed_files() -> None:
    from memory.prompt_files import prompt_files_rebuild
    from resources.bootstrap import bootstrap_seed

    bootstrap_seed(agent_id="main")
    prompt_files_rebuild(agent_id="main", trigger="bench scale")


def database_bytes() -> int:
    from django.db import connection

    if connection.vendor == "sqlite":
        path = Path(connection.settings_dict["NAME"])
        return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        return cursor.fetchone()[0]


def vectors_bytes() -> int:
    """The bytes of `embeddings` with its indexes (SQLite: from `dbstat`; PostgreSQL: its relation size)."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN "
                           "(SELECT name FROM sqlite_master WHERE tbl_name = 'embeddings')")
        else:
            cursor.execute("SELECT pg_total_relation_size('embeddings')")
        return cursor.fetchone()[0]


def index_files_bytes() -> int:
    from fermix_site.conf import conf

    folder = conf.home / "cache" / "vectors"
    return sum(p.stat().st_size for p in folder.rglob("*.usearch")) if folder.exists() else 0


# --- the measures ---------------------------------------------------------------------------------------


def _picks(world, n: int, seed: int) -> list[tuple[str, str]]:
    """`n` conversations (agent, key) of the world that have a row, each as likely as its size."""
    from memory.models import Conversation

    have = set(Conversation.objects.values_list("agent_id", "key"))
    rng, out = random.Random(seed), []
    while len(out) < n:
        agent, _, channel, chat, thread = rng.choices(world.conversations, cum_weights=world.conv_cum, k=1)[0]
        if (agent, f"{channel}:{chat}:{thread}") in have:
            out.append((agent, f"{channel}:{chat}:{thread}"))
    return out


def measure_window(world, reads: int) -> dict:
    from fermix_site import generations
    from memory.conversations import window_read

    picks = _picks(world, reads, seed=13)
    hot, cold, sizes = Stopwatch(), Stopwatch(), []
    for agent, key in picks:
        sizes.append(len(window_read(agent_id=agent, conversation=key)))
        with hot:
            window_read(agent_id=agent, conversation=key)
    for agent, key in picks:
        generations.clear_all()
        with cold:
            window_read(agent_id=agent, conversation=key)
    return {"cached": _p(hot), "uncached": _p(cold), "window_messages_mean": round(sum(sizes) / len(sizes), 1)}


def measure_prompt(repeat: int) -> dict:
    from fermix_site import generations
    from memory.prompt import compose_system_prompt

    def uncached():
        generations.clear_all()
        compose_system_prompt(agent_id="main")

    cached = Stopwatch().time(lambda: compose_system_prompt(agent_id="main"), repeat, warm=10)
    cold = Stopwatch().time(uncached, max(repeat // 2, 10), warm=5)
    return {"cached": _p(cached), "uncached": _p(cold)}


def _sample(repeat: int) -> list[tuple]:
    """`repeat` random messages of `main` (agent, content, owner, channel, chat, thread)."""
    from memory.models import Message

    rng = random.Random(5)
    top = Message.objects.order_by("-id").values_list("id", flat=True).first()
    sample = []
    while len(sample) < repeat:
        row = Message.objects.filter(id=rng.randrange(1, top + 1)).values_list(
            "agent_id", "content", "owner_id", "channel", "chat_id", "thread_scope").first()
        if row and row[0] == "main":
            sample.append(row)
    return sample


def measure_recall(world, mode: str, repeat: int) -> dict:
    """`memory_recall` through `run_tool`, per source, scope and class; the mode each answer ran in."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from bench.recall import query_classes
    from memory.conversations import ConversationKey
    from memory.tools import ToolContext, run_tool

    sample = _sample(repeat)
    classes = {name: texts for name, texts in query_classes(world, sample, repeat).items() if name in CLASSES}
    out = {}
    for source in SOURCES:
        for scope in SCOPES:
            for name, texts in classes.items():
                watch, ran = Stopwatch(), {}
                for (agent, _, owner, channel, chat, thread), text in zip(sample, texts, strict=False):
                    ctx = ToolContext(agent_id=agent, owner_id=owner, trust="operator",
                                      conversation=ConversationKey(channel, chat, thread))
                    arguments = {"query": text, "scope": scope, "source": source, "limit": 20, "mode": mode}
                    with watch:
                        answer = run_tool("memory_recall", ctx, arguments)
                    meta = answer.meta or {}
                    how = meta.get("degraded") or meta.get("mode", "lexical")
                    ran[how] = ran.get(how, 0) + 1
                with CaptureQueriesContext(connection) as captured:  # untimed: what one query asks
                    for (agent, _, owner, channel, chat, thread), text in list(zip(sample, texts, strict=False))[:3]:
                        ctx = ToolContext(agent_id=agent, owner_id=owner, trust="operator",
                                          conversation=ConversationKey(channel, chat, thread))
                        run_tool("memory_recall", ctx, {"query": text, "scope": scope, "source": source,
                                                        "limit": 20, "mode": mode})
                out[f"{source}/{scope}/{name}"] = {**_p(watch), "ran": ran,
                                                   "statements": round(len(captured) / min(3, len(texts)), 1)}
            worst = max((out[f"{source}/{scope}/{n}"] for n in classes), key=lambda r: r["p95"])
            print(f"  {mode:7} {source:8} {scope:7} worst p95 {worst['p95']:8.2f} ms", flush=True)
    return out


def measure_ingest(world, appends: int) -> dict:
    """`message_append` of `appends` messages into the world's conversations, one transaction each; the
    appended messages are deleted afterwards."""
    from django.db import connection

    from memory.conversations import message_append
    from memory.models import Message

    last_id = Message.objects.order_by("-id").values_list("id", flat=True).first()
    picks = _picks(world, appends + 50, seed=17)
    owners = {(a, f"{ch}:{chat}:{t}"): o for a, o, ch, chat, t in world.conversations}
    rng = random.Random(19)
    watch = Stopwatch()
    started = time.perf_counter()
    try:
        for n, (agent, key) in enumerate(picks):
            arguments = {"agent_id": agent, "conversation": key, "owner_id": owners[(agent, key)], "role": "user",
                         "content": world.text(rng.randint(6, 40)), "trust": "operator"}
            if n < 50:  # warm
                message_append(**arguments)
                started = time.perf_counter()
                continue
            with watch:
                message_append(**arguments)
        elapsed = time.perf_counter() - started
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM messages WHERE id > %s", [last_id])
    return {"messages_per_s": round(len(watch.wall) / elapsed, 1), "append": _p(watch), "n": len(watch.wall)}


def warm_up() -> dict:
    from bench.recall import warm_up as recall_warm_up

    started = time.time()
    recall_warm_up()
    return {"warm_up_s": round(time.time() - started, 1)}


def measure_query_embedding(world, repeat: int) -> dict:
    """The local model embedding a query (part of every hybrid recall, on the web worker's own core)."""
    from memory import embeddings

    model = embeddings.embedder()
    texts = [world.text(random.Random(n).randint(3, 12)) for n in range(repeat * 3)]
    watch = Stopwatch()
    for text in texts:
        with watch:
            model.embed_query(text)
    return _p(watch)


def vector_cache_bytes() -> int:
    from memory.search import semantic

    return int(sum(sum(b.nbytes for b in entry.blocks) + entry.ids.nbytes for _, entry in semantic._cache.values()))


def peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def measure_one(args) -> dict:
    """Build (or reuse) one size and measure it; runs in a process of its own."""
    from bench.django_env import setup_django

    if not args.postgres:
        os.environ.pop("DATABASE_URL", None)
    home = Path(args.home)
    if not args.reuse:
        shutil.rmtree(home, ignore_errors=True)  # a new world: nothing of an earlier one in the folder
    home.mkdir(parents=True, exist_ok=True)
    setup_django(str(home))
    from django.db import connection

    from bench.recall import World
    from bench.report import machine, revision

    world = World(args.one)
    report = {"messages": args.one, "vendor": connection.vendor, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                      time.gmtime()),
              "revision": revision(), "machine": machine(), "home": str(home), "load": {}}
    phases = []

    def phase(name):
        report["load"][name] = _load()
        phases.append((name, time.time()))
        print(f"[{args.one:,} {connection.vendor}] {name} (load {report['load'][name]})", flush=True)

    phase("build")
    report["build"] = build(world, args.postgres, args.reuse)
    report["memory_rows"] = _count("memories")
    report["db_bytes"] = database_bytes() - vectors_bytes()  # without the vectors a reused world may hold
    phase("window")
    report["window"] = measure_window(world, args.reads)
    phase("prompt")
    report["prompt"] = measure_prompt(args.reads)
    report["recall"] = {}
    phase("recall lexical")
    report["recall"]["lexical"] = measure_recall(world, "lexical", args.repeat)
    if "hybrid" in args.modes:
        phase("vectors")
        started = time.time()
        from bench.recall import build_vectors_postgres, build_vectors_sqlite

        if connection.vendor == "sqlite":
            build_vectors_sqlite(connection.settings_dict["NAME"], world)
        else:
            build_vectors_postgres(world)
        report["vectors_s"] = round(time.time() - started, 1)
        phase("vector indexes")
        started = time.time()
        from bench.recall import build_vector_indexes

        connection.close()
        build_vector_indexes()
        report["vector_indexes_s"] = round(time.time() - started, 1)
        report["db_bytes_with_vectors"] = database_bytes()
        report["vectors_bytes"] = vectors_bytes()
        report["index_files_bytes"] = index_files_bytes()
        phase("recall hybrid")
        report["hybrid_warm_up"] = warm_up()
        report["query_embedding"] = measure_query_embedding(world, args.repeat)
        report["recall"]["hybrid"] = measure_recall(world, "hybrid", args.repeat)
        phase("recall hybrid, warm")  # the same queries again: each scope's vectors now in this process
        report["recall"]["hybrid_warm"] = measure_recall(world, "hybrid", args.repeat)
        report["vector_cache_bytes"] = vector_cache_bytes()
    phase("ingest")
    report["ingest"] = measure_ingest(world, args.appends)
    report["peak_rss_bytes"] = peak_rss_bytes()
    ends = [at for _, at in phases[1:]] + [time.time()]
    report["phase_s"] = {name: round(end - at, 1) for (name, at), end in zip(phases, ends, strict=True)}
    report["load"]["end"] = _load()
    return report


def _count(table: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
        return cursor.fetchone()[0]


# --- the table -------------------------------------------------------------------------------------------


def worst(report: dict, mode: str, source: str, scope: str, figure: str = "p95") -> float | None:
    rows = [v[figure] for k, v in report["recall"].get(mode, {}).items() if k.startswith(f"{source}/{scope}/")]
    return max(rows) if rows else None


def statements(report: dict, mode: str) -> str:
    """The range of database statements a recall query of this mode ran (per class, source and scope)."""
    counts = [v.get("statements") for v in report["recall"].get(mode, {}).values() if v.get("statements")]
    return f"{min(counts):.0f}–{max(counts):.0f}" if counts else "—"


def rows(reports: list[dict]) -> list[tuple[str, list[str]]]:
    def mb(value):
        return "—" if value is None else f"{value / 1e6:,.0f} MB"

    def f(value, digits=1):
        return "—" if value is None else f"{value:,.{digits}f}"

    def per_million(r, key):
        return f"{mb(r[key])} ({mb(r[key] / r['messages'] * 1e6)})" if r.get(key) else "—"

    out = [
        ("ingest, `message_append` msg/s (p95 ms)",
         [f"{f(r['ingest']['messages_per_s'], 0)} ({f(r['ingest']['append']['p95'], 2)})" for r in reports]),
        ("window read p95 ms, cached / uncached",
         [f"{f(r['window']['cached']['p95'], 2)} / {f(r['window']['uncached']['p95'], 2)}" for r in reports]),
        ("composed prompt p95 ms, cached / uncached",
         [f"{f(r['prompt']['cached']['p95'], 2)} / {f(r['prompt']['uncached']['p95'], 2)}" for r in reports]),
    ]
    names = {"lexical": "lexical", "hybrid": "hybrid, fresh worker", "hybrid_warm": "hybrid, vectors held"}
    for mode, name in names.items():
        if not any(mode in r["recall"] for r in reports):
            continue
        for source in SOURCES:
            out.append((f"recall {name}, {source}: slowest p95 ms, conversation / owner / all",
                        [" / ".join(f(worst(r, mode, source, scope)) for scope in SCOPES)
                         if mode in r["recall"] else "not measured" for r in reports]))
    for source in SOURCES:
        out.append((f"recall lexical, {source}: slowest CPU p95 ms of this process, conversation / owner / all",
                    [" / ".join(f(worst(r, "lexical", source, scope, "cpu_p95")) for scope in SCOPES)
                     for r in reports]))
    out += [
        ("statements a recall query, lexical / hybrid",
         [f"{statements(r, 'lexical')} / {statements(r, 'hybrid')}" for r in reports]),
        ("query embedding p95 ms", [f(r["query_embedding"]["p95"]) if r.get("query_embedding") else "—"
                                    for r in reports]),
        ("database without vectors (per million messages)", [per_million(r, "db_bytes") for r in reports]),
        ("database with vectors (per million messages)", [per_million(r, "db_bytes_with_vectors") for r in reports]),
        ("vector index files; exact vector cache in the process",
         [f"{mb(r.get('index_files_bytes'))}; {mb(r.get('vector_cache_bytes'))}" for r in reports]),
        ("peak resident memory of the process", [mb(r["peak_rss_bytes"]) for r in reports]),
        ("load average (1 min), min–max", [f"{min(r['load'].values()):.1f}–{max(r['load'].values()):.1f}"
                                           for r in reports]),
    ]
    return out


def print_table(reports: list[dict]) -> None:
    vendors = sorted({r["vendor"] for r in reports})
    mixed = len(vendors) > 1
    print(f"\n| {', '.join(vendors)} | " + " | ".join(f"{r['messages']:,} messages" + (f" ({r['vendor']})" * mixed)
                                                   for r in reports) + " |")
    print("|---|" + "---|" * len(reports))
    for name, values in rows(reports):
        print(f"| {name} | " + " | ".join(values) + " |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="message counts, comma-separated")
    parser.add_argument("--home", default="", help="a throw-away folder: one FERMIX_HOME per vendor and size")
    parser.add_argument("--postgres", action="store_true", help="use DATABASE_URL (PostgreSQL)")
    parser.add_argument("--reuse", action="store_true", help="reuse a world already built at that size")
    parser.add_argument("--modes", default="lexical,hybrid", help="recall modes: lexical[,hybrid]")
    parser.add_argument("--repeat", type=int, default=30, help="recall queries per class, source and scope")
    parser.add_argument("--reads", type=int, default=300, help="window reads and composed prompts each way")
    parser.add_argument("--appends", type=int, default=2000, help="messages appended for the ingest rate")
    parser.add_argument("--json", default="", help="write every figure to this file")
    parser.add_argument("--table", metavar="A.json,B.json", help="only print one table of these runs' sizes")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process of one size
    args = parser.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    if set(args.modes) - set(MODES) or "lexical" not in args.modes:
        parser.error("--modes is lexical or lexical,hybrid")
    if args.postgres and not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        parser.error("--postgres needs DATABASE_URL=postgres://…")
    if args.table:
        print_table(sorted((r for name in args.table.split(",") for r in json.loads(Path(name).read_text())["sizes"]),
                           key=lambda r: r["messages"]))
        return
    if not args.home:
        parser.error("--home is required")
    if args.one:
        report = measure_one(args)
        Path(args.json).write_text(json.dumps(report, indent=1))
        return
    vendor = "postgresql" if args.postgres else "sqlite"
    reports = []
    for size in (int(s) for s in args.sizes.split(",")):
        out = Path(args.home) / f"{vendor}-{size}.json"
        command = [sys.executable, "-m", "bench.scale", "--one", str(size), "--home",
                   str(Path(args.home) / f"{vendor}-{size}"), "--json", str(out), "--modes", ",".join(args.modes),
                   "--repeat", str(args.repeat), "--reads", str(args.reads), "--appends", str(args.appends)]
        command += ["--postgres"] * args.postgres + ["--reuse"] * args.reuse
        subprocess.run(command, check=True)
        reports.append(json.loads(out.read_text()))
        print_table(reports)
        if args.json:  # after each size, so a long run keeps what it measured
            Path(args.json).write_text(json.dumps({"vendor": vendor, "sizes": reports}, indent=1))


if __name__ == "__main__":
    main()
