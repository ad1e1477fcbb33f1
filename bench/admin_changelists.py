"""How fast the console's big changelists open: 1,000,000 messages and 100,000 memory rows.

Builds the rows with raw sqlite3 bulk inserts into a migrated throw-away FERMIX_HOME (the FTS5 triggers
index them as they go), then times staff page loads through Django's test client.

Run: `.venv/bin/python -m bench.admin_changelists [--messages 1000000] [--memories 100000] [--repeat 30]`.
"""

import argparse
import itertools
import os
import random
import sqlite3
import sys
import time
from datetime import UTC, datetime, timedelta

from bench.django_env import setup_django
from bench.report import machine
from bench.timing import summary, timed

# Chat-like text: a few very common words, a long tail of rarer ones (Zipf-like), and topic words at a
# rate a search term would have in real conversations.
COMMON = "i the a to and you it is that of in my for on with this be was have me so but not".split()
TOPICS = ("coffee tea lisbon porto marathon running river morning meeting report deadline project flat "
          "renovation jazz fado chess book train flight doctor invoice budget garden recipe").split()
SYLLABLES = "ka to mi ra ne lo su pe di va ho gu ze bi fa".split()


def vocabulary(rng: random.Random, size: int = 20_000) -> tuple[list[str], list[float]]:
    """Made-up words with Zipf weights (the k-th word is 1/k as frequent as the first)."""
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(size)]
    return words, list(itertools.accumulate(1 / k for k in range(1, size + 1)))


CHANNELS = (("telegram", 600), ("discord", 300), ("realtime", 100))
KINDS = ("chat",) * 96 + ("voice_turn",) * 3 + ("notice",)
CATEGORIES = ("identity", "preference", "interest", "goal", "context", "directive", "")
SCOPES = ("owner", "agent", "conversation", "job")


def sentence(rng: random.Random, tail: tuple[list[str], list[float]]) -> str:
    words = []
    for _ in range(rng.randint(6, 30)):
        roll = rng.random()
        if roll < 0.45:
            words.append(rng.choice(COMMON))
        elif roll < 0.46:
            words.append(rng.choice(TOPICS))
        else:
            words.append(rng.choices(tail[0], cum_weights=tail[1])[0])
    return " ".join(words)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def conversations() -> list[tuple[str, str]]:
    return [(channel, str(1000 + i)) for channel, n in CHANNELS for i in range(n)]


def fill(db_path: str, messages: int, memories: int, seed: int = 7) -> dict:
    rng = random.Random(seed)
    tail = vocabulary(rng)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA synchronous=OFF")
    convs = conversations()
    timings = {}
    began = time.perf_counter()
    db.executemany(
        "INSERT INTO conversations (agent_id, key, channel, chat_id, thread_scope, owner_id, window_start_id, "
        "pinned_message_ids, last_peak_prompt_tokens, last_context_window, created_at, updated_at) "
        "VALUES ('main', ?, ?, ?, 'root', 'default', 0, '[]', ?, 128000, ?, ?)",
        [(f"{c}:{chat}:root", c, chat, rng.randint(2_000, 120_000), stamp(start), stamp(start)) for c, chat in convs])
    batch = 50_000
    for first in range(0, messages, batch):
        rows = []
        for i in range(first, min(first + batch, messages)):
            channel, chat = convs[i % len(convs)]
            role = "user" if i % 2 == 0 else "assistant"
            rows.append(("main", "default", channel, chat, "root", "ana" if role == "user" else "", role,
                         rng.choice(KINDS), "guest" if i % 10 == 0 else "operator", sentence(rng, tail), "{}",
                         stamp(start + timedelta(seconds=20 * i))))
        print(f"messages: {first:,}", file=sys.stderr, flush=True)
        with db:
            db.executemany("INSERT INTO messages (agent_id, owner_id, channel, chat_id, thread_scope, sender, role, "
                           "kind, trust, content, metadata_json, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    timings["messages"] = time.perf_counter() - began
    began = time.perf_counter()
    rows = []
    for i in range(memories):
        scope = SCOPES[i % len(SCOPES)]
        owner = "default" if i % 5 else f"guest-{i % 40}"
        scope_id = {"owner": owner, "agent": "main", "conversation": "telegram:1000:root", "job": "job:1"}[scope]
        category = CATEGORIES[i % len(CATEGORIES)]
        target = {"identity": "user_md", "preference": "user_md", "interest": "user_md", "goal": "user_md",
                  "context": "memory_md", "directive": "memory_md"}.get(category, "")
        moment = stamp(start + timedelta(minutes=i))
        archived = moment if i % 10 == 0 else None
        rows.append(("main", owner, scope, scope_id, category, f"fact-{i}", sentence(rng, tail)[:200], 1.0, target,
                     archived, "operator:bench" if archived else "", "bench" if archived else "", moment, moment))
    with db:
        db.executemany(
            "INSERT INTO memories (agent_id, owner_id, scope_type, scope_id, category, key, value, confidence, "
            "promote_target, source_type, source_name, source_description, session_id, run_id, archived_at, "
            "archived_by, archive_reason, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,'','','','',NULL,?,?,?,?,?)", rows)
    timings["memories"] = time.perf_counter() - began
    db.execute("ANALYZE")
    db.close()
    return timings


PAGES = [
    ("messages", "/admin/memory/message/", {}),
    ("messages, page 50", "/admin/memory/message/", {"p": "50"}),
    ("messages, search `marathon deadline`", "/admin/memory/message/", {"q": "marathon deadline"}),
    ("messages, search within channel=discord", "/admin/memory/message/", {"q": "fado", "channel": "discord"}),
    # With an agent chosen the search is recall's default mode: hybrid when the agent's messages have vectors.
    ("messages, search within agent=main", "/admin/memory/message/", {"q": "marathon deadline", "agent_id": "main"}),
    ("messages, filter channel=discord", "/admin/memory/message/", {"channel": "discord"}),
    ("messages, filter trust=guest", "/admin/memory/message/", {"trust": "guest"}),
    ("messages, filter kind=voice_turn", "/admin/memory/message/", {"kind": "voice_turn"}),
    ("memories", "/admin/memory/memory/", {}),
    ("memories, filter category=goal", "/admin/memory/memory/", {"category": "goal"}),
    ("memories, filter archived", "/admin/memory/memory/", {"archived": "yes"}),
    ("memories, search `jazz fado`", "/admin/memory/memory/", {"q": "jazz fado"}),
    ("memories, search within agent=main", "/admin/memory/memory/", {"q": "jazz fado", "agent_id": "main"}),
    ("dashboard", "/admin/fermix/dashboard/", {}),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--home", help="reuse this FERMIX_HOME: rows are only built when it has no messages")
    args = parser.parse_args()
    setup_django(args.home)

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    settings.ALLOWED_HOSTS.append("testserver")  # the test client's host; no template instrumentation
    from memory.models import Memory, Message

    fill_times = {"messages": 0, "memories": 0}
    if not Message.objects.exists():
        fill_times = fill(settings.DATABASES["default"]["NAME"], args.messages, args.memories)
    user = get_user_model().objects.filter(username="bench").first() or get_user_model().objects.create_superuser(
        "bench", "bench@example.com", "bench-password-1")
    client = Client()
    client.force_login(user)
    results = {}
    for name, url, params in PAGES:
        def load(url=url, params=params):
            response = client.get(url, params)
            assert response.status_code == 200, (url, response.status_code)

        timed(load, 3)  # warm up
        results[name] = summary(timed(load, args.repeat))

    print(f"# admin changelists — {time.strftime('%Y-%m-%d')} — {machine()}")
    messages, memories = Message.objects.order_by("-id").values_list("id", flat=True).first(), Memory.objects.count()
    built = (f"built in {fill_times['messages']:.0f} s + {fill_times['memories']:.0f} s (raw sqlite3, FTS5 "
             "triggers on)") if fill_times["messages"] else "rows reused"
    print(f"{messages:,} messages, {memories:,} memory rows; {built}; {args.repeat} staff requests per page "
          f"through the test client; load average during the run {os.getloadavg()[1]:.1f} (5 min)\n")
    print("| page | p50 ms | p95 ms | mean ms |")
    print("|---|---|---|---|")
    for name, s in results.items():
        print(f"| {name} | {s['p50']:.1f} | {s['p95']:.1f} | {s['mean']:.1f} |")


if __name__ == "__main__":
    main()
