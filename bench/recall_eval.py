"""Recall's relevance evaluation: the questions a model asks `memory_recall` about long conversations, and
how many find the messages that answer them, per class of question, scope and mode.

The data is `bench.recall_data`: several owners' conversations with agent `main`, over months, and the
questions about each, in five classes (keyword, paraphrase, reply, temporal, multi_hop). `load()` writes
the conversations as messages, with `distractors` messages of other owners made of the same words
shuffled, and runs `embeddings_rebuild` when the project has that command. `ask()` asks one
question as a bot would, `run_tool("memory_recall", …)` from its owner's conversation, at the moment the
question is asked: the service's clock (`django.utils.timezone.now`) reads that moment, so "yesterday"
means the day before it. `evaluate()` measures recall@5 and recall@10: the share of questions with an
answer among the first k results; a multi-hop question counts when every hop has one (its row `any`
when at least one has).

A mode is passed as `mode` when the tool reports which mode ran (`meta.mode`); a tool that does not is
lexical, asked without the argument. A mode the tool refuses, or whose `meta` names another mode, is
reported as not available.

    .venv/bin/python -m bench.recall_eval                        # lexical, scopes current and all, SQLite
    .venv/bin/python -m bench.recall_eval --mode all --misses    # every mode, the goals; the questions missed
    .venv/bin/python -m bench.recall_eval --scope current --json
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.recall_eval

On PostgreSQL the evaluation runs in a database of its own on the URL's server, created for the run and
dropped after it: `FERMIX_TEST_DATABASE_NAME`, by default `fermix_recall_eval`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING
from unittest import mock
from urllib.parse import urlparse, urlunparse

from bench.django_env import setup_django
from bench.recall_data import CLASSES, PERSONAS, QUESTIONS, Persona, Question

AGENT = "main"
DISTRACTORS = 600
SCOPES = ("current", "all")
MODES = ("lexical", "hybrid", "semantic")
KS = (5, 10)
LIMIT = max(KS)
OVERALL = "overall"
EVAL_DATABASE = "fermix_recall_eval"

if TYPE_CHECKING:
    from memory.tools import ToolResult


# --- data ---------------------------------------------------------------------------------------------


def load(distractors: int = DISTRACTORS, seed: int = 1) -> dict[tuple[str, str], int]:
    """Write every conversation and `distractors` other owners' messages; message ids by (owner, tag)."""
    from django.core.management import call_command, get_commands

    from memory.models import Message

    ids = {}
    for persona in PERSONAS:
        turns = persona.messages()
        rows = Message.objects.bulk_create([
            Message(agent_id=persona.agent, owner_id=persona.owner, channel=persona.channel, chat_id=persona.chat,
                    role=t.role, content=t.text, created_at=t.at) for t in turns])
        ids.update({(persona.owner, t.tag): row.pk for t, row in zip(turns, rows, strict=True) if t.tag})
    Message.objects.bulk_create(distractor_rows(distractors, seed))
    if "embeddings_rebuild" in get_commands():
        call_command("embeddings_rebuild", agent=AGENT, stdout=io.StringIO(), stderr=io.StringIO())
    return ids


def distractor_rows(count: int, seed: int = 1) -> list:
    """Other owners talking about the same things: the conversations' words shuffled into other chats,
    at times spread over the conversations' span."""
    from memory.models import Message

    rng = random.Random(seed)
    turns = [t for p in PERSONAS for t in p.messages()]
    vocabulary = [w for t in turns for w in t.text.split()]
    first, last = min(t.at for t in turns), max(t.at for t in turns)
    return [Message(agent_id=AGENT, owner_id=f"o{i % 7}", channel="slack", chat_id=str(i % 13), role="user",
                    content=" ".join(rng.choices(vocabulary, k=rng.randint(5, 25))),
                    created_at=first + (last - first) * rng.random())
            for i in range(count)]


def answers(persona: Persona, question: Question, ids: dict[tuple[str, str], int]) -> list[set[int]]:
    """The ids that answer each hop of `question`."""
    return [{ids[(persona.owner, tag)] for tag in hop} for hop in question.hops]


# --- asking -------------------------------------------------------------------------------------------


def ask(persona: Persona, question: Question, *, scope: str, mode_arguments: dict | None = None,
        limit: int = LIMIT) -> ToolResult:
    """`memory_recall` for `question` from its owner's conversation, at the moment it is asked."""
    from memory.conversations import ConversationKey
    from memory.tools import ToolContext, run_tool

    ctx = ToolContext(agent_id=persona.agent, owner_id=persona.owner, trust="operator",
                      conversation=ConversationKey(persona.channel, persona.chat))
    arguments = {"query": question.text, "scope": scope, "source": "history", "limit": limit,
                 **(mode_arguments or {})}
    with mock.patch("django.utils.timezone.now", return_value=persona.when_asked(question)):
        return run_tool("memory_recall", ctx, arguments)


def message_ids(result: ToolResult) -> list[int]:
    return [item["id"] for item in result.data or [] if item.get("type") == "message"]


def _meta(result: ToolResult) -> dict:
    return result.as_dict().get("meta") or {}


def mode_arguments(mode: str) -> dict | str:
    """The arguments that select `mode`, or why it is not available.

    A tool that reports modes is asked for each by name, lexical included (it may not be the default);
    one that does not (or refuses the argument) is lexical, asked without it.
    """
    persona, question = QUESTIONS[0]
    probe = ask(persona, question, scope="current", mode_arguments={"mode": mode})
    ran = _meta(probe).get("mode") if probe.ok else None
    if ran == mode:
        return {"mode": mode}
    if ran is None and mode == "lexical":
        return {}
    if not probe.ok:
        return f"not available: {probe.result}"
    if ran is None:
        return "not available: the tool takes no mode"
    return f"not available: asked for {mode}, the tool ran {ran}"


# --- metrics ------------------------------------------------------------------------------------------


def found_at(found: list[int], hops: list[set[int]], k: int) -> tuple[bool, bool]:
    """(every hop, any hop) has an answering id among the first k results."""
    first = set(found[:k])
    hits = [bool(hop & first) for hop in hops]
    return all(hits), any(hits)


def recall_at(results: list[list[int]], answers: list[set[int]], k: int = 10) -> float:
    """Share of questions with an answering id among their first k results."""
    hits = sum(1 for found, want in zip(results, answers, strict=True) if want & set(found[:k]))
    return hits / len(answers)


def class_counts() -> dict[str, int]:
    counts = Counter(q.kind for _, q in QUESTIONS)
    return {kind: counts[kind] for kind in CLASSES}


def first_rank(found: list[int], hop: set[int]) -> int | None:
    return next((i for i, pk in enumerate(found, 1) if pk in hop), None)


def summarise(outcomes: list[tuple[Persona, Question, list[int], list[set[int]]]]) -> dict:
    """recall@k per class and overall (multi_hop: every hop; `any@k`: at least one)."""
    groups: dict[str, list] = {kind: [] for kind in CLASSES}
    for outcome in outcomes:
        groups[outcome[1].kind].append(outcome)
    groups[OVERALL] = outcomes
    out = {}
    for name, items in groups.items():
        row: dict = {"questions": len(items)}
        for k in KS:
            hits = [found_at(found, hops, k) for _, _, found, hops in items]
            row[f"recall@{k}"] = sum(a for a, _ in hits) / len(items) if items else None
            if name == "multi_hop":
                row[f"any@{k}"] = sum(b for _, b in hits) / len(items) if items else None
        out[name] = row
    return out


def evaluate(ids: dict[tuple[str, str], int], *, modes=("lexical",), scopes=SCOPES) -> dict:
    """Every question in each scope and mode: recall per class, and the questions missed at 10."""
    report: dict = {"questions": len(QUESTIONS), "classes": class_counts(), "modes": {}}
    for mode in modes:
        arguments = mode_arguments(mode)
        if isinstance(arguments, str):
            report["modes"][mode] = {"available": False, "note": arguments, "scopes": {}}
            continue
        degraded: Counter = Counter()
        scopes_out = {}
        for scope in scopes:
            outcomes, misses = [], []
            for persona, question in QUESTIONS:
                result = ask(persona, question, scope=scope, mode_arguments=arguments)
                if reason := _meta(result).get("degraded"):
                    degraded[reason] += 1
                found, hops = message_ids(result), answers(persona, question, ids)
                outcomes.append((persona, question, found, hops))
                if not found_at(found, hops, LIMIT)[0]:
                    misses.append(_miss(persona, question, found, hops, result))
            scopes_out[scope] = {"classes": summarise(outcomes), "misses": misses}
        note = "; ".join(f"degraded ({reason}) in {n} answers" for reason, n in degraded.items())
        report["modes"][mode] = {"available": True, "note": note, "scopes": scopes_out}
    return report


def _miss(persona: Persona, question: Question, found: list[int], hops: list[set[int]],
          result: ToolResult) -> dict:
    texts = {item["id"]: item.get("content", "") for item in result.data or [] if item.get("type") == "message"}
    return {"owner": persona.owner, "class": question.kind, "question": question.text,
            "asked_at": persona.when_asked(question).isoformat(), "hops": [list(h) for h in question.hops],
            "ranks": [first_rank(found, hop) for hop in hops],
            "top": [texts[pk][:80] for pk in found[:3]]}


# --- report -------------------------------------------------------------------------------------------


# (label, class, metric): the classes, multi_hop again with any hop found, every question
TABLE_ROWS = [*((kind, kind, "recall") for kind in CLASSES), ("multi_hop (any hop)", "multi_hop", "any"),
              (OVERALL, OVERALL, "recall")]


def table(report: dict) -> str:
    """Markdown: one table per mode, classes by recall@5 / recall@10 in each scope."""
    lines = []
    for mode, entry in report["modes"].items():
        lines.append(f"\n**{mode}**" + (f" ({entry['note']})" if entry["note"] else ""))
        if not entry["available"]:
            continue
        scopes = list(entry["scopes"])
        lines.append("| class | questions | " + " | ".join(f"{s} @5 | {s} @10" for s in scopes) + " |")
        lines.append("|---|---|" + "---|---|" * len(scopes))
        for label, kind, metric in TABLE_ROWS:
            rows = [entry["scopes"][s]["classes"][kind] for s in scopes]
            cells = [_cell(row[f"{metric}@{k}"]) for row in rows for k in KS]
            lines.append(f"| {label} | {rows[0]['questions']} | " + " | ".join(cells) + " |")
    return "\n".join(lines).lstrip("\n")


# The relevance goals of docs/recall.md: hybrid recall@10 in scope current and over all conversations.
GOALS = {"current": 0.95, "all": 0.85}


def goal_checks(report: dict) -> list[tuple[str, str, str, bool]]:
    """The relevance goals as (goal, measured, bound, met), to three decimals: hybrid recall@10 overall ≥
    GOALS in each scope, and above lexical in every class (recall@10; equal is not above). Empty without
    both modes."""
    modes = report["modes"]
    if not all(m in modes and modes[m]["available"] for m in ("hybrid", "lexical")):
        return []
    checks = []
    for scope, goal in GOALS.items():
        if scope in modes["hybrid"]["scopes"]:
            value = modes["hybrid"]["scopes"][scope]["classes"][OVERALL]["recall@10"]
            checks.append((f"hybrid recall@10, scope {scope}", f"{value:.3f}", f"≥ {goal:.2f}", value >= goal))
    for scope in modes["hybrid"]["scopes"]:
        hybrid, lexical = modes["hybrid"]["scopes"][scope]["classes"], modes["lexical"]["scopes"][scope]["classes"]
        behind = [f"{kind} {hybrid[kind]['recall@10']:.3f} ≤ {lexical[kind]['recall@10']:.3f}" for kind in CLASSES
                  if hybrid[kind]["recall@10"] <= lexical[kind]["recall@10"]]
        checks.append((f"hybrid above lexical in every class, scope {scope}", "; ".join(behind) or
                       "every class above", "every class", not behind))
    return checks


def goals(report: dict) -> list[str]:
    """`goal_checks` as a markdown table; empty without both modes."""
    checks = goal_checks(report)
    if not checks:
        return []
    lines = ["| goal | measured | met |", "|---|---|---|"]
    for goal, measured, bound, met in checks:
        label = goal if bound == "every class" else f"{goal} {bound}"
        lines.append(f"| {label} | {measured} | {'met' if met else 'not met'} |")
    return lines


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def misses_text(report: dict) -> str:
    lines = []
    for mode, entry in report["modes"].items():
        for scope, result in entry["scopes"].items():
            lines.append(f"\n{mode}, scope {scope}: {len(result['misses'])} questions without every answer in the "
                         f"first {LIMIT}")
            for miss in result["misses"]:
                ranks = ", ".join("–" if r is None else str(r) for r in miss["ranks"])
                lines.append(f"- [{miss['class']}] {miss['owner']}: {miss['question']} (answer ranks: {ranks}; "
                             f"wanted {miss['hops']}; top: {' | '.join(miss['top']) or 'nothing'})")
    return "\n".join(lines)


# --- command line -------------------------------------------------------------------------------------


def _eval_database(url: str) -> str:
    """Create a database of the evaluation's own on `url`'s server; its URL."""
    import psycopg

    parts = urlparse(url)
    name = os.environ.get("FERMIX_TEST_DATABASE_NAME") or EVAL_DATABASE
    if name == parts.path.lstrip("/"):
        raise SystemExit(f"the evaluation drops its database afterwards: give it another name than {name!r}")
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}"')
        db.execute(f'CREATE DATABASE "{name}"')
    return urlunparse(parts._replace(path=f"/{name}"))


def _drop_database(server_url: str, eval_url: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(server_url, autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{urlparse(eval_url).path.lstrip("/")}"')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=[*MODES, "all"], default="lexical")
    parser.add_argument("--scope", choices=SCOPES, help="one scope (default: both)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    parser.add_argument("--misses", action="store_true", help="also list the questions missed at 10")
    parser.add_argument("--distractors", type=int, default=DISTRACTORS)
    args = parser.parse_args(argv)
    server_url = os.environ.get("DATABASE_URL", "")
    eval_url = _eval_database(server_url) if server_url.startswith("postgres") else ""
    if eval_url:
        os.environ["DATABASE_URL"] = eval_url
    home = setup_django()
    from django.db import connection

    try:
        started = time.monotonic()
        ids = load(args.distractors)
        modes = MODES if args.mode == "all" else (args.mode,)
        report = evaluate(ids, modes=modes, scopes=(args.scope,) if args.scope else SCOPES)
        report.update(vendor=connection.vendor, distractors=args.distractors, seconds=time.monotonic() - started,
                      messages=sum(len(p.messages()) for p in PERSONAS), date=time.strftime("%Y-%m-%d"))
    finally:
        if eval_url:
            _drop_database(server_url, eval_url)
        shutil.rmtree(home, ignore_errors=True)
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return
    print(f"# recall evaluation — {report['date']} — {report['vendor']} — {report['questions']} questions over "
          f"{len(PERSONAS)} conversations ({report['messages']} messages), {args.distractors} distractors\n")
    print(table(report))
    if lines := goals(report):
        print("\n**Goals**\n" + "\n".join(lines))
    if args.misses:
        print(misses_text(report))


if __name__ == "__main__":
    main()
