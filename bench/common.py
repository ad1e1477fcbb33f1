"""Shared set-up for the benchmarks: a throw-away FERMIX_HOME, a migrated database, timing helpers."""

import os
import platform
import statistics
import tempfile
import time


def setup_django(home: str | None = None) -> str:
    home = home or tempfile.mkdtemp(prefix="fermix-bench-")
    os.environ["FERMIX_HOME"] = home
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fermix_site.settings")
    os.environ.setdefault("FERMIX_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return home


def timed(fn, repeat: int) -> list[float]:
    """Run fn `repeat` times; return each duration in milliseconds."""
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))],
        "mean": statistics.fmean(ordered),
    }


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"
