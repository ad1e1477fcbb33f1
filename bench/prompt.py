"""The composed system prompt (cached and uncached) and the prompt-file rebuild, for an owner with 10,000
memory rows, each beside the same work done with raw sqlite3 (the same queries and writes, the same
rendering function, the same files)."""

from __future__ import annotations

import hashlib
import json
from collections import namedtuple
from pathlib import Path

from bench.common import MAIN_AGENT, Figure, Stopwatch, db_now, latency, raw_connect

Row = namedtuple("Row", "id category value updated_at")
BOOTSTRAP = (("identity_md", "IDENTITY.md"), ("soul_md", "SOUL.md"), ("fermix_md", "FERMIX.md"))


def _paths(home: str, agent: str) -> dict[str, Path]:
    root = Path(home)
    paths = {t: root / "bootstrap" / agent / name for t, name in BOOTSTRAP}
    paths.update(user_md=root / "memory" / agent / "USER.md", memory_md=root / "memory" / agent / "MEMORY.md")
    return paths


def raw_current_hashes(conn, agent: str, types) -> dict[str, str]:
    marks = ", ".join("?" * len(types))
    return dict(conn.execute(
        f"SELECT r.resource_type, v.content_hash FROM resources r JOIN resource_revisions v ON v.agent_id = r.agent_id "
        f"AND v.resource_type = r.resource_type AND v.scope_id = r.scope_id AND v.revision = r.current_revision "
        f"WHERE r.agent_id = ? AND r.scope_id = 'global' AND r.resource_type IN ({marks})", (agent, *types)))


def raw_compose(conn, home: str, agent: str) -> str:
    """What an uncached compose does, in plain code: the generations, the bootstrap files checked against
    their current revisions, USER.md and MEMORY.md, one block, one hash."""
    conn.execute("SELECT name, value FROM cache_generations WHERE name IN (?, ?)",
                 (f"memories:{agent}", f"prompt:{agent}")).fetchall()
    paths = _paths(home, agent)
    texts = {t: paths[t].read_bytes().decode("utf-8", "replace") for t, _ in BOOTSTRAP if paths[t].exists()}
    known = raw_current_hashes(conn, agent, list(texts))
    assert all(known.get(t) == hashlib.sha256(c.encode()).hexdigest() for t, c in texts.items())
    messages = [{"role": "system", "content": c} for c in texts.values() if c.strip()]
    block = []
    for t, name in (("user_md", "USER.md"), ("memory_md", "MEMORY.md")):
        content = paths[t].read_text()
        block.append(f"### {name} ({len(content.encode()) // 4} tokens)\n{content.strip() or '(empty)'}")
    messages.append({"role": "system", "content": "<memory-context>\n" + "\n\n".join(block) + "\n</memory-context>"})
    return hashlib.sha256(json.dumps(messages, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


def raw_cache_check(conn, home: str, agent: str) -> None:
    """What a cached compose does: the two generations and the files' stat."""
    conn.execute("SELECT name, value FROM cache_generations WHERE name IN (?, ?)",
                 (f"memories:{agent}", f"prompt:{agent}")).fetchall()
    for path in _paths(home, agent).values():
        path.stat()


def measure_compose(data, repeat: int) -> list[Figure]:
    from django.db import connection

    from fermix_site import generations
    from memory.prompt import compose_system_prompt

    raw = raw_connect(data.db)
    home = data.home

    def uncached():
        generations.clear_all()
        compose_system_prompt(agent_id=MAIN_AGENT)

    warm = min(20, repeat)
    cached = Stopwatch().time(lambda: compose_system_prompt(agent_id=MAIN_AGENT), repeat, warm)
    raw_cached = Stopwatch().time(lambda: raw_cache_check(raw, home, MAIN_AGENT), repeat, warm)
    cold = Stopwatch().time(uncached, repeat, warm)
    raw_cold = Stopwatch().time(lambda: raw_compose(raw, home, MAIN_AGENT), repeat, warm)
    fresh, raw_fresh = _compose_from_rows(data, raw, max(20, repeat // 10))
    raw.close()
    connection.close()
    rows = f"{data.main_owner_rows:,} rows for the owner"
    return [
        latency("composed prompt, cached", cached, raw_cached, 5,
                f"{rows}; raw: the same generation query and file stats"),
        latency("composed prompt, uncached", cold, raw_cold, 20,
                f"{rows}, prompt files on disk; raw: the same files, queries and hash"),
        latency("composed prompt, uncached, files not yet rendered", fresh, raw_fresh, 20,
                "USER.md and MEMORY.md rendered from the rows during the compose (the first compose of an "
                "agent); raw: the same section queries and rendering"),
    ]


def _compose_from_rows(data, raw, repeat: int):
    from fermix_site import generations
    from memory.prompt import compose_system_prompt

    paths = _paths(data.home, MAIN_AGENT)
    aside = {t: paths[t].with_suffix(".bench-aside") for t in ("user_md", "memory_md")}
    for t, path in aside.items():
        paths[t].rename(path)
    try:
        def uncached():
            generations.clear_all()
            compose_system_prompt(agent_id=MAIN_AGENT)

        fresh = Stopwatch().time(uncached, repeat, 5)
        raw_fresh = Stopwatch().time(lambda: [raw_render(raw, MAIN_AGENT, t) for t in ("user_md", "memory_md")],
                                     repeat, 5)
    finally:
        for t, path in aside.items():
            path.rename(paths[t])
    return fresh, raw_fresh


# --- the rebuild -------------------------------------------------------------------------------------

SCOPES = {"identity": "'owner', 'conversation'", "preference": "'owner', 'conversation'",
          "interest": "'owner', 'conversation'", "goal": "'owner', 'conversation'",
          "directive": "'agent', 'owner'", "context": "'agent', 'owner', 'conversation'"}


def raw_render(conn, agent: str, resource_type: str):
    """The rendering queries of one file in plain SQL: each section's newest `cap` rows, and a count of
    the rest when the cap is reached; then the same rendering function."""
    from memory.prompt_files import FILES, render, token_cap

    rows, over_cap = [], 0
    for section in FILES[resource_type]:
        where = f"category = ? AND scope_type IN ({SCOPES[section.category]})"
        args = (agent, "default", str(section.category))
        newest = [Row(*r) for r in conn.execute(
            f"SELECT id, category, value, updated_at FROM memories WHERE agent_id = ? AND owner_id = ? AND "
            f"archived_at IS NULL AND {where} ORDER BY updated_at DESC, id DESC LIMIT {section.cap}", args)]
        rows.extend(newest)
        if len(newest) == section.cap:
            over_cap += conn.execute(f"SELECT count(*) FROM memories WHERE agent_id = ? AND owner_id = ? AND "
                                     f"archived_at IS NULL AND {where}", args).fetchone()[0] - section.cap
    return render(resource_type, rows, token_cap(resource_type), over_cap=over_cap)


def raw_rebuild(conn, home: str, agent: str) -> None:
    """prompt_files_rebuild in plain SQL: render each file; under the write lock compare with the current
    revision, and when it changed add the revision, move the resource to it, bump the prompt generation
    and write the file (temp file, fsync, rename) before COMMIT."""
    from resources import files

    paths = _paths(home, agent)
    for resource_type in ("user_md", "memory_md"):
        rendered = raw_render(conn, agent, resource_type)
        digest = hashlib.sha256(rendered.content.encode()).hexdigest()
        conn.execute("BEGIN IMMEDIATE")
        try:
            resource_id, current = conn.execute(
                "SELECT id, current_revision FROM resources WHERE agent_id = ? AND resource_type = ? AND "
                "scope_id = 'global'", (agent, resource_type)).fetchone()
            current_hash = conn.execute(
                "SELECT content_hash FROM resource_revisions WHERE agent_id = ? AND resource_type = ? AND "
                "scope_id = 'global' AND revision = ?", (agent, resource_type, current)).fetchone()[0]
            on_disk = paths[resource_type].read_bytes()
            assert hashlib.sha256(on_disk).hexdigest() == current_hash  # no hand edit to record
            if digest != current_hash:
                last = conn.execute("SELECT max(revision) FROM resource_revisions WHERE agent_id = ? AND "
                                    "resource_type = ? AND scope_id = 'global'", (agent, resource_type)).fetchone()[0]
                now = db_now()
                conn.execute(
                    "INSERT INTO resource_revisions (agent_id, resource_type, scope_id, revision, parent_revision, "
                    "content_hash, content, byte_size, mutation_source, provenance_json, created_at) "
                    "VALUES (?, ?, 'global', ?, ?, ?, ?, ?, 'extraction_rebuild', ?, ?)",
                    (agent, resource_type, last + 1, current, digest, rendered.content,
                     len(rendered.content.encode()), json.dumps({"rows_shown": len(rendered.shown)}), now))
                conn.execute("UPDATE resources SET current_revision = ?, updated_at = ? WHERE id = ?",
                             (last + 1, now, resource_id))
                conn.execute("INSERT INTO cache_generations (name, value) VALUES (?, 1) ON CONFLICT (name) DO "
                             "UPDATE SET value = cache_generations.value + 1", (f"prompt:{agent}",))
                files.write_atomic(paths[resource_type], rendered.content.encode())
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def measure_rebuild(data, repeat: int) -> list[Figure]:
    from django.db import connection

    from memory.prompt_files import prompt_files_rebuild

    raw = raw_connect(data.db)
    newest = raw.execute("SELECT id FROM memories WHERE agent_id = ? AND owner_id = 'default' AND category = "
                         "'identity' AND scope_type = 'owner' AND archived_at IS NULL ORDER BY updated_at DESC "
                         "LIMIT 1", (MAIN_AGENT,)).fetchone()[0]
    counter = iter(range(10**9))

    def change():  # a new fact on top of USER.md, as after a review (which bumps the rows' generation)
        raw.execute("UPDATE memories SET value = ?, updated_at = ? WHERE id = ?",
                    (f"works on benchmark number {next(counter)}", db_now(), newest))
        raw.execute("INSERT INTO cache_generations (name, value) VALUES (?, 1) ON CONFLICT (name) DO UPDATE "
                    "SET value = cache_generations.value + 1", (f"memories:{MAIN_AGENT}",))

    def rebuild():
        prompt_files_rebuild(agent_id=MAIN_AGENT, trigger="bench")

    watches = {label: Stopwatch() for label in ("changed", "unchanged", "raw changed", "raw unchanged")}
    rebuild()
    for _ in range(repeat):
        for label, fn in (("changed", rebuild), ("raw changed", lambda: raw_rebuild(raw, data.home, MAIN_AGENT))):
            change()
            with watches[label]:
                fn()
        for label, fn in (("unchanged", rebuild), ("raw unchanged", lambda: raw_rebuild(raw, data.home, MAIN_AGENT))):
            with watches[label]:
                fn()
    raw.close()
    connection.close()
    return [
        latency("prompt-file rebuild, a row changed (new USER.md revision and file)", watches["changed"],
                watches["raw changed"], 20, f"{data.main_owner_rows:,} rows for the owner; both fsync the file "
                "and its folder"),
        latency("prompt-file rebuild, nothing changed", watches["unchanged"], watches["raw unchanged"], 20),
    ]
