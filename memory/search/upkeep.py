"""A node's own upkeep of its vector caches: its approximate indexes and its files of large scopes' vectors.

Both are each node's own, under its `$FERMIX_HOME/cache/vectors/`, while a scheduled or queued task runs on
whichever node's cluster takes it: with several nodes, the pass an erasure queued cleaned one node's files,
and a node could wait long for an index it lacked. So each node's heartbeat (`fermix_site.node`, every
`[fermix_core.mirrors] interval_s`) runs the pass for its own files (`run`): when none has run on this node
for EVERY_S, and, at most every AFTER_REMOVAL_S, when vectors of an agent whose caches the node holds were
removed since its last pass (an erasure, a forgotten or changed memory row: the `vectors:<agent>:<kind>`
generations) or a process of the node found no index for a scope that needs one (`ann.wanted`). The pass runs
on a thread of its own, one at a time, so the heartbeat's other parts (the prompt files' mirrors) never wait
for an index build. The schedule `fermix-vector-index` and the task an erasure queues run the same pass,
wherever they land.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import connections

from fermix_site import generations
from fermix_site.conf import conf
from memory import embeddings
from memory.models import Embedding
from memory.search import ann, vector_files
from memory.vectors import vectors_generation

logger = logging.getLogger("fermix.memory.upkeep")

EVERY_S = 300.0  # a pass at least this often on each node
AFTER_REMOVAL_S = 60.0  # and after a removal of vectors, no sooner than this after the last

_lock = threading.Lock()
_last: dict = {"at": None, "seen": None, "thread": None}


def run(agent_id: str | None = None) -> dict[str, object]:
    """Bring this node's approximate indexes up to date (`ann.refresh`), bring current its files of scopes'
    vectors written before a removal and delete those no search will read (`vector_files.sweep`)."""
    model = embeddings.embedder()
    if model is None:
        return {}
    done = ann.refresh(model.model_id, model.dimensions, agent_id=agent_id)
    outcomes: dict[str, object] = {f"{agent}:{kind}": outcome for (agent, kind), outcome in done.items()}
    removed, refreshed = vector_files.sweep(model.model_id, agent_id)
    if removed:
        outcomes["scope_files_removed"] = removed
    if refreshed:
        outcomes["scope_files_refreshed"] = refreshed
    return outcomes


def _removals_seen() -> tuple:
    """The removal generations of the agents whose vector caches this node holds."""
    root = conf.home / "cache" / "vectors"
    agents = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    names = [vectors_generation(agent, kind) for agent in agents for kind in Embedding.Kind.values]
    return tuple(zip(names, generations.current(names), strict=True)) if names else ()


def beat() -> None:
    """The node heartbeat's part: start this node's pass on its own thread when one is due."""
    if embeddings.embedder() is None:
        return
    seen, now, flag = _removals_seen(), time.monotonic(), ann.wanted()
    with _lock:
        running, at = _last["thread"], _last["at"]
        if running is not None and running.is_alive():
            return
        since = None if at is None else now - at
        asked = seen != _last["seen"] or flag.exists()
        if since is not None and since < EVERY_S and (not asked or since < AFTER_REMOVAL_S):
            return
        flag.unlink(missing_ok=True)
        thread = threading.Thread(target=_pass, name="fermix-vector-upkeep", daemon=True)
        _last.update(at=now, seen=seen, thread=thread)
    thread.start()


def _pass() -> None:
    try:
        done = run()
        if done:
            logger.info("vector caches on this node: %s", done)
    except Exception:  # noqa: BLE001 - the next beat tries again
        logger.exception("vector caches on this node: the pass failed")
    finally:
        for connection in connections.all(initialized_only=True):
            connection.close()


def join(timeout: float | None = None) -> None:
    """Wait for this process's pass, if one runs."""
    thread = _last["thread"]
    if thread is not None:
        thread.join(timeout)


@generations.also_clear
def forget() -> None:
    """Forget when this process last ran a pass (as a new process starts)."""
    join()
    with _lock:
        _last.update(at=None, seen=None, thread=None)
