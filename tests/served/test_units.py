"""`systemctl stop` stops each unit of deploy/ by its stop signal, in time and with nothing left behind.

systemd's default (KillMode=control-group) sends the signal to every process of the unit at once. The
task cluster's sentinel and workers then die of the SIGTERM (django-q2 leaves them its default action,
and a worker over its task's timeout is ended with it), and the main process, asking the sentinel to
stop, waits forever on the event the dead sentinel was waiting on: the unit hung until TimeoutStopSec
and its SIGKILL. The units say KillMode=mixed: the signal to the main process alone, which stops the rest
in order; SIGKILL only to what is left after it.
"""

import subprocess
import time

import httpx
import pytest

from tests.conftest import process_env, run_manage
from tests.live import free_port
from tests.units import group, stop, unit_command, unit_environment

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _started(name: str, home) -> tuple:
    env = process_env(FERMIX_HOME=home, FERMIX_BIND="127.0.0.1", FERMIX_PORT=free_port(),
                      FERMIX_EMBEDDINGS_BACKEND="none", FERMIX_LOG_LEVEL="WARNING")
    env.update(unit_environment(name))
    env.update(FERMIX_WEB_WORKERS="1", FERMIX_WORKERS="1")  # how many does not change how they stop
    done = run_manage("migrate", "--noinput", "-v0", env=env)
    assert done.returncode == 0, done.stderr
    log = home / "unit.log"
    process = subprocess.Popen(unit_command(name), cwd=home, env=env, stdout=log.open("w"),
                               stderr=subprocess.STDOUT, start_new_session=True)
    return process, env, log


def _wait(what: str, check, log, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def _cluster_running(process) -> bool:
    # the main process, the sentinel, one worker, the monitor and the pusher
    return len(group(process.pid)) >= 5


def _healthy(port) -> bool:
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and response.json()["worker"]["state"] == "alive"


@pytest.mark.parametrize("name", ["fermix-worker.service", "fermix-web.service"])
def test_a_unit_stops_on_its_stop_signal_in_time_with_nothing_left(name, home):
    process, env, log = _started(name, home.home)
    try:
        if name == "fermix-web.service":
            _wait("/healthz with the cluster alive", lambda: _healthy(env["FERMIX_PORT"]), log)
        else:
            _wait("the cluster's processes", lambda: _cluster_running(process), log)
        time.sleep(1)  # the sentinel back in its guard loop's wait, where a signal to it leaves the event held
        stopped = stop(process, name)
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text()
    assert not stopped.timed_out, f"{name} was still running at TimeoutStopSec:\n{output[-3000:]}"
    assert stopped.left == [], f"{name} left processes behind: {stopped.left}"
    assert stopped.returncode == 0, (stopped, output[-3000:])
    assert "did not stop" not in output  # serve did not have to kill its cluster
