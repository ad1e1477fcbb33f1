"""What the hot caches buy: window reads and row lookups, cached vs uncached vs raw sqlite3 (the window
read by `bench.raw.window`, the row by one SELECT of its unique key).

Run: `.venv/bin/python -m bench.caches [--messages 50] [--repeat 2000]`.
"""

import argparse
import time

from bench import raw
from bench.django_env import raw_connect, setup_django
from bench.report import machine
from bench.timing import summary, timed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    setup_django()

    from django.conf import settings

    from fermix_site import generations
    from memory import conversations, rows

    for i in range(args.messages):
        conversations.message_append(agent_id="main", conversation="bench:1", role="user",
                                     content=f"message {i} with some ordinary words in it")
    for i in range(200):
        rows.memory_upsert(agent_id="main", owner_id="default", scope_type="owner", scope_id="default",
                           key=f"k{i}", value=f"fact number {i}", category="context", actor_type="system")

    def window():
        conversations.window_read(agent_id="main", conversation="bench:1")

    def window_uncached():
        generations.clear_all()
        conversations.window_read(agent_id="main", conversation="bench:1")

    def lookup():
        rows.memory_lookup(agent_id="main", owner_id="default", scope_type="owner", scope_id="default", key="k7")

    def lookup_uncached():
        generations.clear_all()
        lookup()

    conn = raw_connect(settings.DATABASES["default"]["NAME"])
    key = str(conversations.ConversationKey.parse("bench:1"))

    def window_raw():
        raw.window(conn, "main", key)

    def lookup_raw():
        conn.execute("SELECT * FROM memories WHERE agent_id=? AND owner_id=? AND scope_type=? AND scope_id=? "
                    "AND key=? AND archived_at IS NULL", ("main", "default", "owner", "default", "k7")).fetchall()

    results = {}
    for name, fn in [("window read, cached", window), ("window read, uncached", window_uncached),
                     ("window read, raw sqlite3", window_raw), ("row lookup, cached", lookup),
                     ("row lookup, uncached", lookup_uncached), ("row lookup, raw sqlite3", lookup_raw)]:
        timed(fn, 50)  # warm up
        results[name] = summary(timed(fn, args.repeat))

    print(f"# caches — {time.strftime('%Y-%m-%d')} — {machine()}")
    print(f"window of {args.messages} messages; {args.repeat} reads each\n")
    print("| operation | p50 ms | p95 ms | mean ms |")
    print("|---|---|---|---|")
    for name, s in results.items():
        print(f"| {name} | {s['p50']:.3f} | {s['p95']:.3f} | {s['mean']:.3f} |")


if __name__ == "__main__":
    main()
