"""Timing helpers: wall-clock and CPU milliseconds of repeated calls, and their percentiles."""

from __future__ import annotations

import statistics
import time


def timed(fn, repeat: int) -> list[float]:
    """Run fn `repeat` times; return each duration in milliseconds."""
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


class Stopwatch:
    """Wall-clock and CPU (this thread) milliseconds of each timed block: `with watch: ...`.

    The CPU time shows what an operation costs on an idle machine when other work shares the cores.
    """

    def __init__(self):
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def __enter__(self):
        self._wall, self._cpu = time.perf_counter(), time.thread_time()
        return self

    def __exit__(self, *exc):
        self.wall.append((time.perf_counter() - self._wall) * 1000)
        self.cpu.append((time.thread_time() - self._cpu) * 1000)

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)

    def time(self, fn, repeat: int, warm: int = 0) -> Stopwatch:
        for _ in range(warm):
            fn()
        for _ in range(repeat):
            with self:
                fn()
        return self

    def p(self, fraction: float = 0.95, cpu: bool = False) -> float:
        return percentile(sorted(self.cpu if cpu else self.wall), fraction)

    def mean(self, cpu: bool = False) -> float:
        return statistics.fmean(self.cpu if cpu else self.wall)


def percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50": statistics.median(ordered),
        "p95": percentile(ordered, 0.95),
        "p99": percentile(ordered, 0.99),
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
        "n": len(ordered),
    }
