"""Stopping `serve` stops every process it started, even a task cluster that does not stop when asked."""

import os
import signal
import time

import pytest

from fermix_site.management.commands.serve import descendants

pytestmark = [pytest.mark.slow, pytest.mark.live]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie has ended
    except OSError:
        return False


def _cluster(serve_pid: int) -> list[int]:
    """The task cluster `serve` started and every process it started in turn."""
    for pid in descendants(serve_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"qcluster" in cmdline.read():
                    return [pid, *descendants(pid)]
        except OSError:
            continue
    raise AssertionError("serve started no task cluster")


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the process tree is read from /proc")
def test_a_cluster_that_does_not_stop_in_time_is_killed_with_every_process_it_started(fermix_server):
    server = fermix_server()
    deadline = time.monotonic() + 30
    cluster = _cluster(server.process.pid)
    while len(cluster) < 3 and time.monotonic() < deadline:  # the sentinel and its workers start after the cluster
        time.sleep(0.2)
        cluster = _cluster(server.process.pid)
    assert len(cluster) >= 3, cluster
    for pid in cluster:  # none of them can act on a signal now, as a cluster stuck in its shutdown
        os.kill(pid, signal.SIGSTOP)
    server.stop()  # SIGINT to the group; serve asks again (SIGTERM), waits, then kills
    assert server.process.returncode is not None
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in cluster) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in cluster if _alive(pid)] == []
    assert "the task cluster did not stop within" in server.log_text()  # and serve says so
