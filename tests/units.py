"""The systemd units of deploy/ as the tests run them: a unit's command and environment with this
checkout's paths, and `stop`, which does what `systemctl stop` does with the unit's KillMode, KillSignal
and TimeoutStopSec (systemd's defaults where the unit says nothing)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"


def unit_setting(name: str, key: str, default: str) -> str:
    """The last `key=` line of the unit (a later line overrides an earlier one, as in systemd)."""
    values = re.findall(rf"^{key}=(.+)$", (DEPLOY / name).read_text(), re.M)
    return values[-1].strip() if values else default


def unit_command(name: str) -> list[str]:
    """The unit's ExecStart, with the install paths of deploy/ turned into this checkout's."""
    argv = shlex.split(unit_setting(name, "ExecStart", ""))
    assert argv[0] == "/opt/fermix/.venv/bin/python" and argv[1] == "/opt/fermix/manage.py", argv
    return [sys.executable, str(ROOT / "manage.py"), *argv[2:]]


def unit_environment(name: str) -> dict:
    text = (DEPLOY / name).read_text()
    return dict(line.split("=", 1) for line in re.findall(r"^Environment=(.+)$", text, re.M))


def group(pgid: int) -> list[int]:
    """The live processes of a process group (the unit's control group, as the tests start a unit in a
    session of its own), read from /proc; a zombie has ended."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()  # after the name, which may hold spaces
        except OSError:
            continue  # gone meanwhile
        if fields[0] != b"Z" and int(fields[3]) == pgid:
            found.append(int(entry))
    return found


@dataclass
class Stopped:
    seconds: float  # from the stop signal to the main process's end
    timed_out: bool  # TimeoutStopSec passed: SIGKILL to every process, as systemd sends it
    returncode: int
    left: list[int]  # processes still running once the main one ended (systemd then kills them)


def stop(process: subprocess.Popen, name: str) -> Stopped:
    """Stop the unit `name` whose main process is `process` (started with `start_new_session`) as
    `systemctl stop` does: KillSignal to every process of the group (KillMode=control-group) or to the
    main process alone (mixed, process); SIGKILL to all at TimeoutStopSec; once the main process has
    ended, SIGKILL to what is left (not with KillMode=process)."""
    mode = unit_setting(name, "KillMode", "control-group")
    kill_signal = signal.Signals[unit_setting(name, "KillSignal", "SIGTERM")]
    timeout = float(unit_setting(name, "TimeoutStopSec", "90"))
    started, timed_out = time.monotonic(), False
    if mode == "control-group":
        os.killpg(process.pid, kill_signal)
    else:
        process.send_signal(kill_signal)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    seconds = time.monotonic() - started
    left = group(process.pid)
    if mode != "process":
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return Stopped(seconds, timed_out, process.returncode, left)
