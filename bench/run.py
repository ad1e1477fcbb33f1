"""The scale benchmark: a synthetic data set, the storage primitives beside raw sqlite3, and the
service's own paths against absolute budgets.

    python -m bench.run --size quick                    # `make bench`: 100k messages / 20k memories
    python -m bench.run --size full --reuse /var/tmp/fermix-bench/full   # 1M / 100k, data set kept
    python -m bench.run --only window,prompt --messages 200000

The data set is built with raw sqlite3 bulk inserts into a migrated throw-away FERMIX_HOME, removed at
the end, or into the `--reuse` folder, where it is kept for the next run (messages a run appends are
deleted at the end; each run reviews conversations not reviewed before, so a full-size set serves
several runs). Every figure is printed beside its budget and whether the run met it; the storage
primitives (append, window read, full-text query, file write) also beside the same storage work done
with raw sqlite3 in the same run (`bench.raw`), and the ratio. The composer, the rebuild and the
reviewer have no raw copy: their budgets are absolute. The relevance goals (`bench.recall_eval`) and the
default embedding model's (`bench.embeddings`) run in processes of their own and are printed the same way.
Recall by query class and the console's changelists have their own benchmarks (`bench/recall.py`,
`bench/admin_changelists.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import diff, http, prompt, review, storage
from bench.dataset import SIZES, prepare_dataset
from bench.django_env import raw_connect
from bench.report import Figure, machine, markdown_table, memory_total, revision

FAMILIES = {
    "window": storage.measure_window,
    "search": storage.measure_search,
    "file": storage.measure_file_write,
    "prompt": prompt.measure_compose,
    "rebuild": prompt.measure_rebuild,
    "review": review.measure_overhead,
    "diff": diff.measure_diff,
    "ingest": storage.measure_ingest,
    "durability": storage.measure_durability,
    "embedding_cost": storage.measure_embedding_cost,
    "http": lambda data, count, state: http.measure_http(data, count, raw_rate=state.get("raw_rate")),
    "throughput": review.measure_throughput,
    "relevance": lambda data, count: measure_relevance(),
    "embedding_model": lambda data, count: measure_embedding_model(),
}
TAKES_STATE = ("ingest", "http")  # ingest leaves raw sqlite3's rate there for the HTTP family
COUNTS = {
    "quick": {"window": 1000, "search": 200, "file": 300, "prompt": 300, "rebuild": 60, "review": 60, "diff": 5,
              "ingest": 4000, "durability": 4000,
              "embedding_cost": 4000, "http": 3000, "throughput": 40, "relevance": 1, "embedding_model": 1},
    "full": {"window": 10000, "search": 1000, "file": 1000, "prompt": 2000, "rebuild": 200, "review": 150,
             "diff": 10, "ingest": 20000, "durability": 10000,
             "embedding_cost": 10000, "http": 6000, "throughput": 200, "relevance": 1, "embedding_model": 1},
}


def _bench_json(module: str, *arguments: str) -> list[dict]:
    """Another benchmark's JSON output, run in a process of its own (on SQLite, in its own FERMIX_HOME)."""
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "FERMIX_HOME")}
    done = subprocess.run([sys.executable, "-m", module, *arguments], capture_output=True, text=True, env=env,
                          timeout=3600, check=True)
    text = done.stdout.strip()
    return [json.loads(text)] if text.startswith("{\n") else [json.loads(line) for line in text.splitlines()]


def measure_relevance() -> list[Figure]:
    """The relevance goals on the evaluation (`bench.recall_eval --mode all`)."""
    from bench import recall_eval

    report = _bench_json("bench.recall_eval", "--mode", "all", "--json")[0]
    return [Figure(f"relevance: {goal}", measured, bound, met, note="bench.recall_eval, SQLite")
            for goal, measured, bound, met in recall_eval.goal_checks(report)]


def measure_embedding_model() -> list[Figure]:
    """The embedding goals of the default local model (`bench.embeddings`)."""
    from bench import embeddings
    from memory.embeddings.local import DEFAULT_MODEL

    results = _bench_json("bench.embeddings", "--models", DEFAULT_MODEL, "--json")
    skipped = [r["skipped"] for r in results if "skipped" in r]
    if skipped:
        return [Figure(f"embedding model {DEFAULT_MODEL}", "not measured", "", None, note=skipped[0])]
    return [Figure(f"embedding model: {what}", value, bound, met, note=DEFAULT_MODEL)
            for what, value, bound, met in embeddings.goal_checks(results)]


def run_family(name: str, data, count: int, state: dict) -> list[Figure]:
    if name in TAKES_STATE:
        return FAMILIES[name](data, count, state)
    return FAMILIES[name](data, count)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="quick")
    parser.add_argument("--messages", type=int, help="messages in the data set (default: by --size)")
    parser.add_argument("--memories", type=int, help="memory rows in the data set (default: by --size)")
    parser.add_argument("--reuse", metavar="PATH", help="FERMIX_HOME holding the data set; built there if missing")
    parser.add_argument("--only", metavar="A,B", help=f"families to run, of: {', '.join(FAMILIES)}")
    parser.add_argument("--output", metavar="FILE", help="also write the markdown section to FILE")
    args = parser.parse_args(argv)
    args.families = args.only.split(",") if args.only else list(FAMILIES)
    unknown = set(args.families) - set(FAMILIES)
    if unknown:
        parser.error(f"unknown families {', '.join(sorted(unknown))}; choose from {', '.join(FAMILIES)}")
    args.messages = args.messages or SIZES[args.size]["messages"]
    args.memories = args.memories or SIZES[args.size]["memories"]
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    command = "python -m bench.run " + shlex.join(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    data = prepare_dataset(messages=args.messages, memories=args.memories, reuse=args.reuse,
                           progress=lambda text: print(text, file=sys.stderr, flush=True))
    conn = raw_connect(data.db)
    last_id = conn.execute("SELECT max(id) FROM messages").fetchone()[0]
    conn.close()
    figures, loads, state = [], [], {}
    try:
        for name in args.families:
            loads.append(f"{name} {os.getloadavg()[0]:.1f}")
            print(f"measuring {name}…", file=sys.stderr, flush=True)
            family_started = time.monotonic()
            figures += run_family(name, data, COUNTS[args.size][name], state)
            print(f"  {name} took {time.monotonic() - family_started:.0f} s", file=sys.stderr, flush=True)
    finally:
        if args.reuse:
            conn = raw_connect(data.db)  # the appended messages go; the data set stays as built
            conn.execute("DELETE FROM messages WHERE id > ?", (last_id,))
            conn.close()
        else:
            shutil.rmtree(data.home, ignore_errors=True)
    section = render(args, data, figures, command, time.monotonic() - started, loads)
    print(section)
    if args.output:
        Path(args.output).write_text(section)


def render(args, data, figures, command, total, loads) -> str:
    budgeted = [f for f in figures if f.met is not None]
    missed = [f.name for f in budgeted if not f.met]
    lines = [
        f"### {args.size} size: {data.messages:,} messages, {data.memories:,} memory rows "
        f"({time.strftime('%Y-%m-%d')})",
        "",
        f"`{command}` at {revision()} on {machine()}, {memory_total()}; "
        f"{len(data.agents)} agents × {data.owners_per_agent} owners, "
        f"{data.conversations:,} conversations, {data.main_owner_rows:,} rows for the rendered owner of `main`. "
        f"Data set: built in {data.build_seconds:.0f} s ({'reused' if data.reused else 'new'}); "
        f"whole run {total / 60:.1f} min. Load average (1 min) as each family started: {', '.join(loads)}.",
        "",
        markdown_table(figures),
        "",
        f"{len(budgeted) - len(missed)} of {len(budgeted)} budgets met"
        + (f"; not met: {'; '.join(missed)}." if missed else "."),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
