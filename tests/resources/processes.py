"""Start real Python processes that run resource services against the test database together."""

import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT, process_env

# Each process sets Django up, says it is ready, waits for the go file, then runs its statement, so
# all of them reach the database at once rather than one after another as they finish starting.
PRELUDE = """
import sys, time, pathlib, django
django.setup()
ready, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.005)
"""


def run_together(statements: list[str], folder: Path, timeout: float = 120) -> list[str]:
    """Run each statement in its own process, released at the same moment; returns their stdout."""
    go = folder / "go"
    procs = []
    for i, statement in enumerate(statements):
        ready = folder / f"ready-{i}"
        procs.append((ready, subprocess.Popen(
            [sys.executable, "-c", PRELUDE + statement, str(ready), str(go)],
            cwd=ROOT, env=process_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )))
    deadline = time.monotonic() + timeout
    while not all(ready.exists() for ready, _ in procs):
        if any(p.poll() is not None for _, p in procs) or time.monotonic() > deadline:
            break  # a process died while starting: its output below says why
        time.sleep(0.01)
    go.touch()
    outputs = []
    for _, proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err
        outputs.append(out.strip())
    return outputs
