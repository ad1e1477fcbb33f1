"""The scale benchmark: a synthetic data set and every hot path measured on it, beside raw sqlite3.

    python -m bench.run --size quick                    # `make bench`: 100k messages / 20k memories
    python -m bench.run --size full --reuse /var/tmp/fermix-bench/full   # 1M / 100k, data set kept
    python -m bench.run --only window,prompt --messages 200000

The data set is built with raw sqlite3 bulk inserts into a migrated throw-away FERMIX_HOME, removed at
the end, or into the `--reuse` folder, where it is kept for the next run (messages a run appends are
deleted at the end; each run reviews conversations not reviewed before, so a full-size set serves
about five runs). Each family prints its figures beside their goals, the same operation done with raw
sqlite3 on the same schema in the same run (or the named baseline), the ratio, and met or not.
Recall by query class and the console's changelists have their own benchmarks (`bench/recall.py`,
`bench/admin_changelists.py`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from bench.common import SIZES, Figure, machine, markdown_table, memory_total, prepare_dataset, raw_connect

FAMILIES = ("window", "prompt", "rebuild", "review", "diff", "ingest", "durability", "http", "throughput")
COUNTS = {
    "quick": {"window": 1000, "prompt": 300, "rebuild": 60, "review": 60, "diff": 5, "ingest": 4000,
              "durability": 4000, "http": 3000, "throughput": 40},
    "full": {"window": 10000, "prompt": 2000, "rebuild": 200, "review": 150, "diff": 10, "ingest": 20000,
             "durability": 10000, "http": 6000, "throughput": 200},
}


def run_family(name: str, data, count: int, state: dict) -> list[Figure]:
    from bench import diff, http, ingest, prompt, review

    if name == "window":
        return ingest.measure_window(data, count)
    if name == "prompt":
        return prompt.measure_compose(data, count)
    if name == "rebuild":
        return prompt.measure_rebuild(data, count)
    if name == "review":
        return review.measure_overhead(data, count)
    if name == "diff":
        return diff.measure_diff(data, count)
    if name == "ingest":
        figures = ingest.measure_ingest(data, count)
        state["raw_rate"] = float(figures[0].raw.split()[0].replace(",", ""))
        return figures
    if name == "durability":
        return ingest.measure_durability(data, count)
    if name == "http":
        return http.measure_http(data, count, raw_rate=state.get("raw_rate"))
    return review.measure_throughput(data, count)


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
    met = [f for f in figures if f.met is not None]
    lines = [
        f"### {args.size} size: {data.messages:,} messages, {data.memories:,} memory rows "
        f"({time.strftime('%Y-%m-%d')})",
        "",
        f"`{command}` on {machine()}, {memory_total()}; {len(data.agents)} agents × {data.owners_per_agent} owners, "
        f"{data.conversations:,} conversations, {data.main_owner_rows:,} rows for the rendered owner of `main`. "
        f"Data set: built in {data.build_seconds:.0f} s ({'reused' if data.reused else 'new'}); "
        f"whole run {total / 60:.1f} min. Load average (1 min) as each family started: {', '.join(loads)}.",
        "",
        markdown_table(figures),
        "",
        f"{sum(1 for f in met if f.met)} of {len(met)} goals met.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
