"""The node heartbeat: what each node does for itself every `[fermix_core.mirrors] interval_s` seconds.

Scheduled tasks run once for the whole installation, on whichever cluster takes them; some work belongs
to each node: keeping its own mirrors of the prompt files (`resources.mirrors`) and queueing again the
tasks its broker refused (`fermix_site.enqueue`). Apps add their part with `on_beat`; the cluster's
workers start the loop (`start`), and of a node's processes the one that holds
`$FERMIX_HOME/run/node-heartbeat.lock` beats, so a node beats once per interval however many workers
it runs.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from django.db import close_old_connections, connections

from fermix_site.conf import conf

log = logging.getLogger("fermix.node")

_beats: list[Callable[[], None]] = []
_started = threading.Event()


def on_beat(beat: Callable[[], None]) -> None:
    """Run `beat` at every node heartbeat (each app's `ready`)."""
    if beat not in _beats:
        _beats.append(beat)


def beat() -> None:
    """One heartbeat of this node: every registered part, each on its own (one failing stops none)."""
    for part in list(_beats):
        try:
            part()
        except Exception:  # noqa: BLE001 - a heartbeat part must never end the loop
            log.exception("node heartbeat: %s failed", getattr(part, "__qualname__", part))
        finally:
            close_old_connections()


def _take_node_lock() -> int | None:
    path = Path(conf.home) / "run" / "node-heartbeat.lock"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd  # held for the life of this process


def _loop() -> None:
    held = None
    while True:
        try:
            if held is None:
                held = _take_node_lock()
            if held is not None:
                beat()
        except Exception:  # noqa: BLE001
            log.exception("node heartbeat failed")
        finally:
            for connection in connections.all(initialized_only=True):
                connection.close()
        time.sleep(conf.mirrors.interval_s)


def start(*args, **kwargs) -> None:
    """Start this process's heartbeat thread once (django-q2's `post_spawn` calls it in each worker)."""
    if _started.is_set():
        return
    _started.set()
    threading.Thread(target=_loop, name="fermix-node-heartbeat", daemon=True).start()
