"""Process-local caches that are never stale: every entry is checked against a generation counter.

A write bumps the counter (`bump`) inside its own transaction; a reader fetches the counter (one
primary-key lookup) and serves its cached value only if it was built at that same generation. The
cache itself lives in this process (no pickling, no network), so it costs nothing to share, yet a
second process's append, archive or compaction is seen at once because the counter is in the database.

Generation names used across the code:
- `conv:<agent>:<conversation key>`: a conversation's window (append, clear, compaction).
- `memories:<agent>`: any memory row of the agent (upsert, archive, restore, erase).
- `prompt:<agent>`: anything a composed system prompt depends on besides memory rows (resources, soul).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connections, router

from fermix_site.models import Generation
from fermix_site.queries import generation_bump


def _connection():
    return connections[router.db_for_write(Generation)]


def bump(*names: str) -> dict[str, int]:
    """Increment each named generation; call inside the writing transaction. Returns the new values."""
    connection = _connection()
    return {name: generation_bump(connection, name) for name in names}


def current(names: Iterable[str]) -> tuple[int, ...]:
    """The present value of each named generation (0 for one never bumped), in the order given."""
    names = list(names)
    found = dict(Generation.objects.filter(name__in=names).values_list("name", "value"))
    return tuple(found.get(n, 0) for n in names)


class LocalCache:
    """A bounded LRU map of key -> (generations, value), safe across threads."""

    def __init__(self, max_entries: int = 2048):
        self.max_entries = max_entries
        self._data: OrderedDict[Any, tuple[tuple[int, ...], Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key, generations: tuple[int, ...]):
        with self._lock:
            entry = self._data.get(key)
            if entry is not None and entry[0] == generations:
                self._data.move_to_end(key)
                self.hits += 1
                return True, entry[1]
            self.misses += 1
            return False, None

    def put(self, key, generations: tuple[int, ...], value) -> None:
        with self._lock:
            self._data[key] = (generations, value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def discard(self, key) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def read_through(self, key, names: list[str], build: Callable[[], Any]):
        """Serve the cached value if built at the current generations, else build and remember it.

        Generations are read BEFORE building: a write that lands in between makes the entry look
        older than it is (a wasted miss later), never newer (a stale hit).
        """
        return self.read_at(key, current(names), build)

    def read_at(self, key, generations: tuple[int, ...], build: Callable[[], Any]):
        """`read_through` at generations the caller has read (before the rows `build` reads)."""
        found, value = self.get(key, generations)
        if found:
            return value
        value = build()
        self.put(key, generations, value)
        return value


_clears: list[Callable[[], None]] = []  # how to empty each local cache of this process


def local_cache(max_entries: int = 2048) -> LocalCache:
    cache = LocalCache(max_entries)
    _clears.append(cache.clear)
    return cache


def also_clear(clear: Callable[[], None]) -> Callable[[], None]:
    """Have `clear_all` call `clear` too: the emptying of a process-local cache kept valid some other way
    than by these counters (the highest id it read, a generation and a row count), which a rolled-back or
    swapped database can fool as it fools a counter. Returns `clear`, so it can decorate it."""
    _clears.append(clear)
    return clear


def clear_all() -> None:
    """Empty every local cache of this process (tests, and after a database swap)."""
    for clear in _clears:
        clear()
