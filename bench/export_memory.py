"""Peak memory of `memory_export` and `memory_import` against the number of messages exported.

    python -m bench.export_memory --messages 100000 300000      # one data set per size, each thrown away
    python -m bench.export_memory --messages 1000000 --reuse /var/tmp/fermix-bench/full

Each size gets the benchmark data set (`bench.dataset`), with every row moved to the agent `main` so one
export holds all of it. The export (`memory_export --output`) and the import into a fresh, migrated
FERMIX_HOME (`memory_import`) each run as their own process, whose peak resident set (VmHWM) is read
while it runs, beside the same for `manage.py check` (Python and Django loaded, no work done). Flat
figures across sizes mean both commands stream.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.dataset import MAIN_AGENT, _drop_fts_triggers, prepare_dataset
from bench.django_env import raw_connect

ROOT = Path(__file__).resolve().parent.parent


def run(home: Path, *args: str) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of `manage.py ARGS` with FERMIX_HOME=home."""
    env = {**os.environ, "FERMIX_HOME": str(home), "DJANGO_SETTINGS_MODULE": "fermix_site.settings",
           "FERMIX_LOG_LEVEL": "WARNING"}
    env.pop("DATABASE_URL", None)
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        peak = max(peak, _high_water_kb(process.pid))
        time.sleep(0.05)
    seconds = time.monotonic() - started
    if process.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed: {process.stderr.read().decode()[-2000:]}")
    process.stderr.close()
    return seconds, peak / 1024


def _high_water_kb(pid: int) -> int:
    """The process's peak resident set so far (VmHWM). Not getrusage: a child's ru_maxrss also counts
    the parent's pages it was forked with, and this process holds a whole data set's build."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def one_agent(db: Path) -> None:
    """Move every row to the agent `main` (the few memory rows whose key `main` already has stay put)."""
    conn = raw_connect(db)
    triggers = _drop_fts_triggers(conn)
    conn.execute("BEGIN")
    for table in ("messages", "conversations", "memories", "review_states"):
        conn.execute(f"UPDATE OR IGNORE {table} SET agent_id = ?", (MAIN_AGENT,))
    conn.execute("COMMIT")
    for mirror in ("messages_fts", "memories_fts"):
        conn.execute(f"INSERT INTO {mirror}({mirror}) VALUES ('rebuild')")
    for sql in triggers:
        conn.execute(sql)
    conn.close()


def measure(messages: int, reuse: str | None) -> dict:
    data = prepare_dataset(messages=messages, memories=messages // 10, reuse=reuse,
                           progress=lambda text: print(text, file=sys.stderr))
    home = Path(data.home)
    one_agent(data.db)
    name = f"bench-{messages}.jsonl"
    baseline = run(home, "check")[1]
    export_s, export_mb = run(home, "memory_export", "--agent", MAIN_AGENT, "--output", name)
    path = home / "exports" / name
    rows, size = sum(1 for _ in path.open("rb")) - 2, path.stat().st_size
    target = Path(tempfile.mkdtemp(prefix="fermix-bench-import-"))
    try:
        run(target, "migrate", "--noinput", "-v0")
        import_s, import_mb = run(target, "memory_import", str(path))
    finally:
        shutil.rmtree(target, ignore_errors=True)
        path.unlink()
        if not reuse:
            shutil.rmtree(home, ignore_errors=True)
    return {"messages": messages, "rows": rows, "mb": size / 2**20, "baseline": baseline,
            "export_s": export_s, "export_mb": export_mb, "import_s": import_s, "import_mb": import_mb}


def row(f: dict) -> str:
    return (f"| {f['messages']:,} | {f['rows']:,} | {f['mb']:,.0f} MiB | {f['baseline']:.0f} MiB "
            f"| {f['export_s']:.0f} s, {f['export_mb']:.0f} MiB | {f['import_s']:.0f} s, {f['import_mb']:.0f} MiB |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[100_000, 300_000])
    parser.add_argument("--reuse", help="keep (or reuse) the data set in this folder (one size only)")
    parser.add_argument("--row", action="store_true", help=argparse.SUPPRESS)  # one size, its table row only
    args = parser.parse_args(argv)
    if args.reuse and len(args.messages) > 1:
        raise SystemExit("--reuse holds one data set: give one --messages size with it")
    if args.row:
        print(row(measure(args.messages[0], args.reuse)), flush=True)
        return
    print("| messages | rows exported | file | `check` RSS | export: time, peak RSS | import: time, peak RSS |")
    print("|---:|---:|---:|---:|---:|---:|", flush=True)
    for messages in args.messages:
        # Django is set up once per process, on one FERMIX_HOME: each size gets a process of its own.
        command = [sys.executable, "-m", "bench.export_memory", "--row", "--messages", str(messages)]
        if args.reuse:
            command += ["--reuse", args.reuse]
        subprocess.run(command, cwd=ROOT, check=True)  # the data set's build progress goes to stderr


if __name__ == "__main__":
    main()
