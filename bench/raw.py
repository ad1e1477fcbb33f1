"""The raw sqlite3 (and raw file) baselines of the storage primitives: append a message, read a window,
a full-text query, write a prompt file. Each does the same storage work as the service's primitive with
plain sqlite3 on the same schema, so a family can show the service's cost as a ratio in the same run.

Nothing here copies a pipeline (the reviewer, the prompt-file rebuild, the composer): those are measured
through the service against absolute budgets only.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from bench.django_env import db_now


def append(conn: sqlite3.Connection, message: dict) -> int:
    """A message append: the conversation row (created on first use), the message, and the
    conversation's cache generation, in one IMMEDIATE transaction."""
    agent, key = message["agent_id"], message["conversation"]
    channel, chat_id, thread = key.split(":")
    now = db_now()
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT id FROM conversations WHERE agent_id = ? AND key = ?", (agent, key)).fetchone() is None:
            conn.execute("INSERT INTO conversations (agent_id, key, channel, chat_id, thread_scope, owner_id, "
                         "window_start_id, created_at, updated_at, pinned_message_ids) VALUES (?,?,?,?,?,?,0,?,?,'[]')",
                         (agent, key, channel, chat_id, thread, message["owner_id"], now, now))
        cursor = conn.execute(
            "INSERT INTO messages (agent_id, owner_id, channel, chat_id, thread_scope, sender, role, kind, trust, "
            "content, metadata_json, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (agent, message["owner_id"], channel, chat_id, thread, message["sender"], message["role"], "chat",
             message["trust"], message["content"], json.dumps({}), now))
        conn.execute("INSERT INTO cache_generations (name, value) VALUES (?, 1) ON CONFLICT (name) DO UPDATE "
                     "SET value = cache_generations.value + 1 RETURNING value", (f"conv:{agent}:{key}",)).fetchone()
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return cursor.lastrowid


def window(conn: sqlite3.Connection, agent: str, key: str) -> list[tuple]:
    """A conversation's current window: the conversation row, then the messages from its window start on
    (by id) with the pinned messages and the checkpoint, put in time order."""
    channel, chat_id, thread = key.split(":")
    row = conn.execute("SELECT window_start_id, checkpoint_message_id, pinned_message_ids FROM conversations "
                       "WHERE agent_id = ? AND key = ?", (agent, key)).fetchone()
    if row is None:
        return []
    head = json.loads(row[2]) + ([row[1]] if row[1] else [])
    found = conn.execute(
        "SELECT * FROM messages WHERE (agent_id = ? AND channel = ? AND chat_id = ? AND thread_scope = ? AND id >= ? "
        "AND kind != 'checkpoint')" + (f" OR id IN ({', '.join('?' * len(head))})" if head else ""),
        (agent, channel, chat_id, thread, row[0], *head)).fetchall()
    rest = sorted((m for m in found if m[0] >= row[0] and m[8] != "checkpoint"), key=lambda m: (m[12], m[0]))
    return [m for m in found if m[0] in head] + rest


def fts_match(text: str, columns: str = "content") -> str:
    """The plain FTS5 query of `text`: every word quoted and OR-ed, in the given columns of the mirror."""
    words = [w for w in text.replace('"', " ").replace("\x00", " ").split() if any(c.isalnum() for c in w)]
    if not words:
        return ""
    return "{" + columns + "} : (" + " OR ".join(f'"{w}"' for w in words) + ")"


def fts_messages(conn: sqlite3.Connection, text: str, filters: dict, limit: int = 20) -> list[int]:
    """The plain full-text query of messages: FTS5 `MATCH` of every word OR-ed, joined to the scope's
    filters, `ORDER BY bm25 LIMIT`."""
    match = fts_match(text)
    if not match:
        return []
    where = " AND ".join(f"m.{column} = ?" for column in filters)
    sql = (f"SELECT m.id FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid WHERE messages_fts "
           f"MATCH ? AND {where} ORDER BY bm25(messages_fts, 1, 0, 0, 0, 0, 0) LIMIT {limit}")
    return [r[0] for r in conn.execute(sql, [match, *filters.values()]).fetchall()]


def fts_memories(conn: sqlite3.Connection, text: str, filters: dict, limit: int = 20) -> list[int]:
    """The plain full-text query of memory rows (key and value), live rows only."""
    match = fts_match(text, "key value")
    if not match:
        return []
    where = " AND ".join(f"m.{column} = ?" for column in filters)
    sql = (f"SELECT m.id FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid WHERE memories_fts "
           f"MATCH ? AND {where} AND m.archived_at IS NULL ORDER BY bm25(memories_fts, 1, 1, 0, 0) LIMIT {limit}")
    return [r[0] for r in conn.execute(sql, [match, *filters.values()]).fetchall()]


def file_write(path: Path, data: bytes) -> None:
    """A durable replace: write a temp file, fsync it, rename it over the target, fsync the folder."""
    tmp = path.with_name(f".{path.name}.raw.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
