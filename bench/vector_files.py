"""A large scope's first search in a new process: its vectors read from the database, or mapped from the node's
file of them (`memory.search.vector_files`), alternating, on a world `bench.recall --mode hybrid` built.

    .venv/bin/python -m bench.vector_files --home /var/tmp/fermix-recall-1m

For each of the largest conversations and owners of agent `main`: the time from a process that holds
nothing of the scope to the scope's exact nearest 100 (the generation check, the count or the file, the
rows, the scores), as `memory.search.semantic` takes it at a query. The query's vector is computed once,
outside the timing.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.django_env import setup_django
from bench.report import machine


def _first_search(model, kind: str, scope: dict, vector, from_file: bool) -> float:
    from memory.search import semantic, vector_files

    semantic.clear()  # what a new process holds
    path = vector_files.path(model.model_id, kind, scope)
    kept = path.read_bytes() if not from_file and path.exists() else None
    if kept is not None:
        path.unlink()
    writes, vector_files.FROM_VECTORS = vector_files.FROM_VECTORS, (vector_files.FROM_VECTORS if from_file else 1 << 62)
    try:
        started = time.perf_counter()
        semantic._best(semantic._entry(model.model_id, model.dimensions, kind, scope), vector, 100)
        return (time.perf_counter() - started) * 1000
    finally:
        vector_files.FROM_VECTORS = writes
        if kept is not None:
            path.write_bytes(kept)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", required=True, help="FERMIX_HOME of a world built by bench.recall --mode hybrid")
    parser.add_argument("--scopes", type=int, default=10, help="the largest conversations and owners each")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    setup_django(args.home)
    from django.db.models import Count

    from memory import embeddings
    from memory.models import Embedding
    from memory.search import semantic

    model = embeddings.embedder()
    vector = model.embed_query("what did we talk about last time?")
    rows = Embedding.objects.filter(model_id=model.model_id, kind="message", agent_id="main")
    scopes = []  # (what the scope is, its filters, its vectors, ms from the database, ms from the file)
    for column, label in (("conversation", "conversation"), ("owner_id", "owner")):
        for value, n in rows.values_list(column).annotate(n=Count("id")).order_by("-n")[:args.scopes]:
            scopes.append((label, {"agent_id": "main", column: value}, n, [], []))
    for _, scope, *_ in scopes:  # each scope's file written once, as the first process to read it writes it
        semantic.clear()
        semantic._entry(model.model_id, model.dimensions, "message", scope)
    for round_ in range(args.rounds):
        for _, scope, _, database, file in scopes:
            for from_file in ((False, True) if round_ % 2 else (True, False)):
                (file if from_file else database).append(_first_search(model, "message", scope, vector, from_file))
    print(f"# a large scope's first search — {time.strftime('%Y-%m-%d')} — {machine()}\n")
    print("| scope | vectors | from the database ms (median) | from the file ms (median) |")
    print("|---|---|---|---|")
    for label, _, n, database, file in scopes:
        print(f"| {label} | {n:,} | {statistics.median(database):.1f} | {statistics.median(file):.1f} |")


if __name__ == "__main__":
    main()
