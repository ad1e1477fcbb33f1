"""A unified diff between two 1 MB revisions, as the API and `resource_diff` produce it, against its
absolute budget."""

from __future__ import annotations

import random

from bench.dataset import Vocabulary
from bench.report import Figure, against_budget
from bench.timing import Stopwatch

AGENT, TYPE = "diffbench", "fermix_md"
SIZE = 1024 * 1024
DIFF_MS = 500


def _document(rng: random.Random, vocab: Vocabulary) -> list[str]:
    lines, size, section = [], 0, 0
    while size < SIZE:
        if len(lines) % 40 == 0:
            section += 1
            line = f"\n## Section {section}: {vocab.sentence(rng, 2, 6, 3)}\n"
        else:
            line = "- " + vocab.sentence(rng, 6, 20, 11) + "\n"
        lines.append(line)
        size += len(line.encode())
    return lines


def _edited(rng: random.Random, vocab: Vocabulary, lines: list[str]) -> list[str]:
    """About 2 % of the lines changed, inserted or deleted, spread through the document."""
    out = []
    for line in lines:
        roll = rng.random()
        if roll < 0.01:
            out.append("- " + vocab.sentence(rng, 6, 20, 11) + "\n")
        elif roll < 0.015:
            out += [line, "- " + vocab.sentence(rng, 6, 20, 11) + "\n"]
        elif roll >= 0.02 or not line.startswith("- "):
            out.append(line)
    return out


def prepare(data) -> None:
    """Two revisions of a 1 MB FERMIX.md of a separate agent (kept across runs of a reused data set)."""
    from resources.models import ResourceRevision
    from resources.services import resource_write_file

    if ResourceRevision.objects.filter(agent_id=AGENT, resource_type=TYPE).count() >= 2:
        return
    rng, vocab = random.Random(5), Vocabulary(seed=data.seed)
    before = _document(rng, vocab)
    for lines in (before, _edited(rng, vocab, before)):
        resource_write_file(agent_id=AGENT, resource_type=TYPE, content="".join(lines), mutation_source="manual_edit")


def measure_diff(data, repeat: int) -> list[Figure]:
    from django.db import connection

    from resources.diff import revision_diff
    from resources.selectors import resource_revision_get

    prepare(data)

    def service():
        a, b = (resource_revision_get(agent_id=AGENT, resource_type=TYPE, revision=n) for n in (1, 2))
        return revision_diff(a, b)

    a, b = (resource_revision_get(agent_id=AGENT, resource_type=TYPE, revision=n) for n in (1, 2))
    sizes = len(a.content.encode()), len(b.content.encode())
    diff_lines = service().count("\n")
    watch = Stopwatch().time(service, repeat)
    connection.close()
    return [against_budget("1 MB revision diff", watch, DIFF_MS,
                           f"revisions of {sizes[0] / 1024:.0f} KiB and {sizes[1] / 1024:.0f} KiB, about 2 % of "
                           f"{a.content.count(chr(10)):,} lines edited, {diff_lines:,} diff lines")]
