"""What a benchmark prints: figures beside their budgets (and, for storage primitives, the raw sqlite3
baseline of the same run), as a markdown table, and the machine they were measured on."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.timing import Stopwatch

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Figure:
    """One measured figure beside its budget and, where there is one, its baseline in the same run."""

    name: str
    value: str  # the figure, with its unit: "1.2 ms p95", "850 msg/s"
    budget: str = ""  # "p95 ≤ 2 ms", "≥ 40 % of raw"; "" when there is no budget
    met: bool | None = None  # None: no budget
    raw: str = ""  # the raw sqlite3 (or bare view, or ideal) figure
    ratio: str = ""  # "62 % of raw", "3.1× raw time"
    note: str = ""


def ms(value: float) -> str:
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _detail(watch: Stopwatch) -> str:
    return f"p50 {ms(watch.p(0.5))} ms, CPU p95 {ms(watch.p(cpu=True))} ms; n = {len(watch.wall):,}"


def against_budget(name: str, watch: Stopwatch, budget_ms: float | None, note: str = "") -> Figure:
    """A p95 latency of a service path beside its absolute budget; p50 and CPU p95 in the note."""
    p95 = watch.p()
    detail = _detail(watch)
    return Figure(name, f"{ms(p95)} ms p95", f"p95 ≤ {budget_ms:g} ms" if budget_ms else "",
                  None if budget_ms is None else p95 <= budget_ms, note=f"{note}; {detail}" if note else detail)


def against_raw(name: str, watch: Stopwatch, raw: Stopwatch, budget_ms: float | None, note: str = "") -> Figure:
    """A p95 latency of a storage primitive beside its budget and the raw sqlite3 p95 of the same run."""
    figure = against_budget(name, watch, budget_ms, note)
    figure.raw = f"{ms(raw.p())} ms p95"
    figure.ratio = f"{watch.p() / raw.p():.1f}× raw time"
    figure.note += f"; raw p50 {ms(raw.p(0.5))} ms, CPU p95 {ms(raw.p(cpu=True))} ms"
    return figure


def verdict(figure: Figure) -> str:
    return "—" if figure.met is None else ("met" if figure.met else "**not met**")


def markdown_table(figures: list[Figure]) -> str:
    lines = ["| operation | figure | budget | raw sqlite3 / baseline | ratio | budget met |",
             "|---|---|---|---|---|---|"]
    for f in figures:
        lines.append(f"| {f.name} | {f.value} | {f.budget or '—'} | {f.raw or '—'} | {f.ratio or '—'} | {verdict(f)} |")
    notes = [f"- {f.name}: {f.note}" for f in figures if f.note]
    return "\n".join(lines + ([""] + notes if notes else []))


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"SQLite {sqlite3.sqlite_version}, {platform.system()}")


def memory_total() -> str:
    try:
        with open("/proc/meminfo") as meminfo:
            kib = int(meminfo.readline().split()[1])
        return f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        return "unknown memory"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def revision() -> str:
    """The commit the benchmark ran from, marked when the work tree had changes."""
    commit = _git("rev-parse", "--short", "HEAD") or "an unknown commit"
    return f"{commit} (with uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no") else commit
