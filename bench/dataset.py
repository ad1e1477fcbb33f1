"""The synthetic data set of `bench.run`: a Zipf vocabulary, many agents, owners and conversations,
compacted windows and memory rows over every category and scope, written with raw sqlite3 bulk inserts
into a migrated FERMIX_HOME (a fixture, built fast; every measured path goes through the service), and
the samples of it the families measure on."""

from __future__ import annotations

import bisect
import itertools
import json
import random
import sqlite3
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.django_env import db_now, db_time, raw_connect, setup_django

# --- a Zipf-distributed vocabulary -----------------------------------------------------------------

# The most frequent ranks are real function words, as in any chat log; the long tail is made-up words.
COMMON = ("the i to a and you it of is that in my for me be on this have with do what can so not but we "
          "at was are just like your about will if get how when know think go time today need want "
          "work home week tomorrow please thanks yes no").split()
ONSETS = ("b", "br", "c", "ch", "d", "dr", "f", "g", "gr", "h", "j", "k", "l", "m", "n", "p", "pl", "r", "s",
          "sh", "st", "t", "tr", "v", "w", "z")
VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou")
CODAS = ("", "", "n", "r", "s", "l", "m", "t", "nd", "st")


class Vocabulary:
    """`size` words whose frequencies follow Zipf's law (rank r has weight 1 / r**s)."""

    def __init__(self, size: int = 30_000, s: float = 1.07, seed: int = 1):
        rng = random.Random(seed)
        words, seen = list(COMMON), set(COMMON)
        while len(words) < size:
            word = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
                           for _ in range(rng.choice((1, 2, 2, 2, 3))))
            if word not in seen:
                seen.add(word)
                words.append(word)
        self.words = words
        self.cum_weights = list(itertools.accumulate(1 / rank**s for rank in range(1, size + 1)))

    def sample(self, rng: random.Random, k: int) -> list[str]:
        return rng.choices(self.words, cum_weights=self.cum_weights, k=k)

    def sentence(self, rng: random.Random, lo: int = 3, hi: int = 120, median: float = 14) -> str:
        length = max(lo, min(hi, round(rng.lognormvariate(0, 0.7) * median)))
        return " ".join(self.sample(rng, length))


def weighted_index(rng: random.Random, cum_weights: list[float]) -> int:
    return bisect.bisect(cum_weights, rng.random() * cum_weights[-1])


# --- the synthetic data set ------------------------------------------------------------------------

SIZES = {"quick": {"messages": 100_000, "memories": 20_000}, "full": {"messages": 1_000_000, "memories": 100_000}}
MARKER = "bench-dataset.json"
MAIN_AGENT, MAIN_OWNER = "main", "default"
CHANNELS = (("telegram", 0.5), ("discord", 0.3), ("slack", 0.15), ("realtime", 0.05))
CATEGORIES = (("identity", 0.1), ("preference", 0.2), ("interest", 0.2), ("goal", 0.1), ("context", 0.25),
              ("directive", 0.05), ("", 0.1))
PROMOTE = {"identity": "user_md", "preference": "user_md", "interest": "user_md", "goal": "user_md",
           "context": "memory_md", "directive": "memory_md", "": ""}
SCOPES = (("owner", 0.6), ("conversation", 0.2), ("agent", 0.1), ("job", 0.1))


@dataclass
class Dataset:
    """What was built, read back from `$FERMIX_HOME/bench-dataset.json` when a data set is reused."""

    home: str
    messages: int
    memories: int
    seed: int = 20261130
    agents: list[str] = field(default_factory=list)
    owners_per_agent: int = 0
    conversations: int = 0
    main_owner_rows: int = 0
    build_seconds: float = 0
    reused: bool = False

    @property
    def db(self) -> Path:
        return Path(self.home) / "memory.db"

    def save(self) -> None:
        (Path(self.home) / MARKER).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, home: str | Path) -> Dataset | None:
        path = Path(home) / MARKER
        if not path.exists():
            return None
        return cls(**{**json.loads(path.read_text()), "home": str(home), "reused": True})


def _weighted(rng: random.Random, pairs) -> str:
    return rng.choices([p[0] for p in pairs], weights=[p[1] for p in pairs])[0]


def _conversations(rng: random.Random, data: Dataset) -> list[dict]:
    """Conversations of every agent, each owned by one of the agent's owners (the first is the agent's
    rendered owner `default`)."""
    rows = []
    for index in range(data.conversations):
        agent = data.agents[index % len(data.agents)]
        owner_rank = min(int(rng.paretovariate(1.2)) - 1, data.owners_per_agent - 1)
        owner = MAIN_OWNER if owner_rank == 0 else f"owner{owner_rank:03d}"
        channel = _weighted(rng, CHANNELS)
        chat_id = f"{rng.randrange(10**9)}"
        thread = "root" if rng.random() < 0.85 else f"t{rng.randrange(1000)}"
        rows.append({"agent": agent, "owner": owner, "channel": channel, "chat_id": chat_id, "thread": thread,
                     "key": f"{channel}:{chat_id}:{thread}", "count": 0, "ids": []})
    return rows


def build_dataset(home: str | Path, *, messages: int, memories: int, seed: int = 20261130,
                  progress=print) -> Dataset:
    """Fill the migrated database at `$home/memory.db` with raw sqlite3 bulk inserts.

    Many agents, owners and conversations; conversation sizes and words both Zipf-distributed; windows
    of 20-100 messages after a checkpoint (as compaction leaves them); memory rows over every category
    and scope, 10,000 of them (or half, in small sets) for the main agent's rendered owner.
    """
    started = time.monotonic()
    rng = random.Random(seed)
    data = Dataset(home=str(home), messages=messages, memories=memories, seed=seed,
                   agents=[MAIN_AGENT] + [f"agent{n:02d}" for n in range(1, max(3, messages // 100_000 + 2))],
                   owners_per_agent=25, conversations=max(50, messages // 50),
                   main_owner_rows=min(10_000, memories // 2))
    vocab = Vocabulary(seed=seed)
    conn = raw_connect(data.db)
    conn.execute("PRAGMA synchronous=OFF")  # a throw-away build: durability of the build itself is moot
    conn.execute("PRAGMA cache_size=-262144")
    conversations = _conversations(rng, data)
    triggers = _drop_fts_triggers(conn)
    _insert_messages(conn, rng, vocab, conversations, data, progress)
    _insert_conversations(conn, rng, vocab, conversations, data)
    _insert_memories(conn, rng, vocab, conversations, data, progress)
    progress("  rebuilding the full-text indexes")
    for mirror in ("messages_fts", "memories_fts"):
        conn.execute(f"INSERT INTO {mirror}({mirror}) VALUES ('rebuild')")
    for sql in triggers:
        conn.execute(sql)
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data.build_seconds = round(time.monotonic() - started, 1)
    return data


def _drop_fts_triggers(conn: sqlite3.Connection) -> list[str]:
    """The FTS5 mirrors are rebuilt once at the end (much faster than row by row); the triggers are
    put back exactly as the migrations made them."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%_fts_%'").fetchall()
    for name, _ in rows:
        conn.execute(f'DROP TRIGGER "{name}"')
    return [sql for _, sql in rows]


def _insert_messages(conn, rng, vocab, conversations, data, progress) -> None:
    weights = list(itertools.accumulate(1 / rank**0.9 for rank in range(1, len(conversations) + 1)))
    order = list(range(len(conversations)))
    rng.shuffle(order)  # busy conversations spread over agents
    start = datetime.now(UTC) - timedelta(days=365)
    step = timedelta(days=365) / max(1, data.messages)
    kinds = ("chat",) * 96 + ("voice_turn",) * 3 + ("notice",)
    chunk, message_id = [], 0
    for message_id in range(1, data.messages + 1):
        conv = conversations[order[weighted_index(rng, weights)]]
        role = "user" if conv["count"] % 2 == 0 else "assistant"
        trust = "operator" if role == "user" and rng.random() < 0.8 else "guest"
        kind = rng.choice(kinds)
        sender = conv["owner"] if role == "user" else "assistant"
        created = db_time(start + step * message_id)
        chunk.append((message_id, conv["agent"], conv["owner"], conv["channel"], conv["chat_id"], conv["thread"],
                      sender, role, kind, trust, vocab.sentence(rng), "{}", created))
        conv["count"] += 1
        conv["ids"].append(message_id)
        if len(chunk) == 50_000:
            _write_messages(conn, chunk)
            chunk = []
            progress(f"  messages: {message_id:,}/{data.messages:,}")
    _write_messages(conn, chunk)


def _write_messages(conn, rows) -> None:
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO messages (id, agent_id, owner_id, channel, chat_id, thread_scope, sender, role, kind, trust, "
        "content, metadata_json, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    conn.execute("COMMIT")


def _insert_conversations(conn, rng, vocab, conversations, data) -> None:
    """One row per conversation; a long conversation has been compacted: its window is its newest 20-100
    messages after a checkpoint summary (a system message stored after the others)."""
    next_id = data.messages + 1
    now = db_now()
    checkpoints, rows = [], []
    for conv in conversations:
        if not conv["ids"]:
            continue
        keep = rng.randint(20, 100)
        window_start, checkpoint_id = 0, None
        if len(conv["ids"]) > keep:
            window_start = conv["ids"][-keep]
            checkpoint_id = next_id
            next_id += 1
            checkpoints.append((checkpoint_id, conv["agent"], conv["owner"], conv["channel"], conv["chat_id"],
                                conv["thread"], "", "system", "checkpoint", "operator",
                                "Summary of the earlier conversation: " + vocab.sentence(rng, 40, 200, 90), "{}",
                                now))
        rows.append((conv["agent"], conv["key"], conv["channel"], conv["chat_id"], conv["thread"], conv["owner"],
                     window_start, now, now, checkpoint_id, "[]"))
        conv["window_start"] = window_start
    _write_messages(conn, checkpoints)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO conversations (agent_id, key, channel, chat_id, thread_scope, owner_id, window_start_id, "
        "created_at, updated_at, checkpoint_message_id, pinned_message_ids) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
    conn.execute("COMMIT")


def _insert_memories(conn, rng, vocab, conversations, data, progress) -> None:
    by_agent = {}
    for conv in conversations:
        by_agent.setdefault(conv["agent"], []).append(conv["key"])
    start = datetime.now(UTC) - timedelta(days=365)
    owners = [f"owner{n:03d}" for n in range(1, data.owners_per_agent)]
    rows, events = [], []
    for index in range(1, data.memories + 1):
        if index <= data.main_owner_rows:
            agent, owner = MAIN_AGENT, MAIN_OWNER
        else:
            agent = rng.choice(data.agents)
            owner = MAIN_OWNER if rng.random() < 0.3 else rng.choice(owners)
        category = _weighted(rng, CATEGORIES)
        scope_type = _weighted(rng, SCOPES)
        scope_id = {"owner": owner, "agent": agent, "job": f"job:{rng.randrange(50)}",
                    "conversation": rng.choice(by_agent.get(agent) or ["telegram:0:root"])}[scope_type]
        value = vocab.sentence(rng, 3, 30, 9)[:200]
        updated = db_time(start + timedelta(seconds=rng.randrange(365 * 86400)))
        archived = updated if rng.random() < 0.05 else None
        rows.append((index, agent, owner, scope_type, scope_id, category, f"{category or 'note'}_{index}", value,
                     1.0, PROMOTE[category], "", "", "", "", None, None, archived, "bench" if archived else "", "",
                     updated, updated, None))
        events.append((index, "add", None, value, "", category, "import", "bench", "", "[]", updated))
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO memories (id, agent_id, owner_id, scope_type, scope_id, category, key, value, confidence, "
        "promote_target, source_type, source_name, source_description, session_id, run_id, source_message_id, "
        "archived_at, archived_by, archive_reason, created_at, updated_at, source_id) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    conn.executemany(
        "INSERT INTO memory_events (memory_id, action, before_value, after_value, before_category, after_category, "
        "actor_type, actor_id, reason, message_ids, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)", events)
    conn.execute("COMMIT")
    progress(f"  memories: {data.memories:,}")


def prepare_dataset(*, messages: int, memories: int, reuse: str | None, progress=print) -> Dataset:
    """A migrated throw-away FERMIX_HOME with the data set, reused when `reuse` already holds one of
    the same size. Sets up Django on it; seeds the bootstrap files and renders the prompt files."""
    home = Path(reuse) if reuse else Path(tempfile.mkdtemp(prefix="fermix-bench-"))
    home.mkdir(parents=True, exist_ok=True)
    found = Dataset.load(home)
    if found and (found.messages, found.memories) != (messages, memories):
        raise SystemExit(f"{home} holds a data set of {found.messages:,} messages / {found.memories:,} memories; "
                         "use another --reuse path for this size")
    setup_django(str(home))
    if found:
        progress(f"reusing the data set in {home} (built in {found.build_seconds:.0f} s)")
        return found
    from django.db import connections

    connections.close_all()
    progress(f"building {messages:,} messages and {memories:,} memory rows in {home}")
    data = build_dataset(home, messages=messages, memories=memories, progress=progress)
    _seed_files(data)
    data.save()
    progress(f"built in {data.build_seconds:.0f} s")
    return data


def _seed_files(data: Dataset) -> None:
    from memory.prompt_files import prompt_files_rebuild
    from resources.bootstrap import bootstrap_seed

    for agent in data.agents:
        bootstrap_seed(agent_id=agent)
        prompt_files_rebuild(agent_id=agent, trigger="bench data set")


# --- samples of the data set -----------------------------------------------------------------------


def conversation_sample(data: Dataset, n: int, seed: int) -> list[tuple]:
    """`n` conversations (agent, key, owner, channel, chat_id, thread, id), each as likely as its share
    of the messages (people write where they already talk)."""
    conn = raw_connect(data.db)
    sizes = {tuple(r[:4]): r[4] for r in conn.execute(
        "SELECT agent_id, channel, chat_id, thread_scope, count(*) FROM messages GROUP BY 1, 2, 3, 4")}
    rows = conn.execute("SELECT agent_id, key, owner_id, channel, chat_id, thread_scope, id FROM conversations "
                        "ORDER BY id").fetchall()
    conn.close()
    weights = list(itertools.accumulate(sizes.get((r[0], r[3], r[4], r[5]), 1) for r in rows))
    rng = random.Random(seed)
    return [rows[weighted_index(rng, weights)] for _ in range(n)]


def sample_messages(data: Dataset, n: int, seed: int) -> list[dict]:
    """`n` new operator messages as keyword arguments of `message_append`, for sampled conversations."""
    rng, vocab = random.Random(seed), Vocabulary(seed=data.seed)
    return [{"agent_id": conv[0], "conversation": conv[1], "owner_id": conv[2], "role": "user",
             "content": vocab.sentence(rng), "trust": "operator", "sender": conv[2]}
            for conv in conversation_sample(data, n, seed)]


def sample_texts(data: Dataset, agent: str, n: int, seed: int) -> list[tuple[str, str]]:
    """(owner, text) of `n` random messages of `agent`, oldest id first."""
    conn = raw_connect(data.db)
    top = conn.execute("SELECT max(id) FROM messages").fetchone()[0]
    rng, out = random.Random(seed), []
    while len(out) < n:
        row = conn.execute("SELECT owner_id, content FROM messages WHERE id = ? AND agent_id = ? AND kind = 'chat'",
                           (rng.randrange(1, top + 1), agent)).fetchone()
        if row:
            out.append(row)
    conn.close()
    return out
