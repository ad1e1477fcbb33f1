"""Unified diffs between revisions, labelled with type, revision and time, plain or coloured for a terminal."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resources.models import ResourceRevision

NO_NEWLINE = "\\ No newline at end of file\n"


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        # Mark the last line the way `diff -u` does, so a missing final newline shows in the diff.
        lines[-1] += "\n" + NO_NEWLINE
    return lines


def unified_diff(a: str, b: str, *, from_label: str, to_label: str, context: int = 3) -> str:
    """`diff -u` of two texts; "" when they are equal."""
    if a == b:
        return ""
    out = difflib.unified_diff(_lines(a), _lines(b), fromfile=from_label, tofile=to_label, n=max(context, 0))
    return "".join(_split_marks(out))


def _split_marks(chunks):
    # difflib keeps our "\ No newline" marker glued to its line: prefix it and emit it as its own line.
    for chunk in chunks:
        if chunk.endswith(NO_NEWLINE) and chunk != NO_NEWLINE:
            yield chunk[: -len(NO_NEWLINE)]
            yield NO_NEWLINE
        else:
            yield chunk


def revision_label(revision: ResourceRevision) -> str:
    """`soul_md r3 (2026-11-29 20:31:05 UTC, rollback)`."""
    when = revision.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    scope = "" if revision.scope_id == "global" else f" [{revision.scope_id}]"
    return f"{revision.resource_type}{scope} r{revision.revision} ({when}, {revision.mutation_source})"


def revision_diff(a: ResourceRevision, b: ResourceRevision, *, context: int = 3) -> str:
    return unified_diff(a.content, b.content, from_label=revision_label(a), to_label=revision_label(b), context=context)


# The colours `git diff` uses: file labels bold, hunk headers cyan, removed lines red, added lines green.
RESET = "\033[0m"
COLOURS = (("--- ", "\033[1m"), ("+++ ", "\033[1m"), ("@@", "\033[36m"), ("-", "\033[31m"), ("+", "\033[32m"))


def coloured(diff: str) -> str:
    """A unified diff with ANSI colours on each line; the text itself is unchanged."""
    out = []
    for line in diff.splitlines(keepends=True):
        body, end = (line[:-1], "\n") if line.endswith("\n") else (line, "")
        colour = next((c for prefix, c in COLOURS if body.startswith(prefix)), "")
        out.append(f"{colour}{body}{RESET}{end}" if colour else line)
    return "".join(out)
