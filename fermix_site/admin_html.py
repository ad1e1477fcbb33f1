"""HTML for untrusted text: markdown rendered then sanitised, and diffs with every piece escaped."""

from __future__ import annotations

from dataclasses import dataclass

import markdown
import nh3
from diff_match_patch import diff_match_patch
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# No images: a prompt file that names a remote image would make the operator's browser fetch it.
ALLOWED_TAGS = nh3.ALLOWED_TAGS - {"img"}
MARKDOWN_EXTENSIONS = ["fenced_code", "tables", "sane_lists"]

EQUAL, DELETE, INSERT = diff_match_patch.DIFF_EQUAL, diff_match_patch.DIFF_DELETE, diff_match_patch.DIFF_INSERT


def marked_html(text: str, start: str, end: str) -> SafeString:
    """`text` escaped, the parts between `start` and `end` (a search snippet's matched words) in <mark>."""
    pieces, rest = [], text or ""
    while (i := rest.find(start)) >= 0 and (j := rest.find(end, i + len(start))) >= 0:
        pieces += [escape(rest[:i]), "<mark>", escape(rest[i + len(start):j]), "</mark>"]
        rest = rest[j + len(end):]
    pieces.append(escape(rest))
    return mark_safe("".join(pieces))  # every piece of text above is escaped


def markdown_html(text: str) -> SafeString:
    """Markdown rendered to HTML, then cleaned by nh3: no scripts, no event handlers, no javascript: links."""
    rendered = markdown.markdown(text or "", extensions=MARKDOWN_EXTENSIONS)
    return mark_safe(nh3.clean(rendered, tags=ALLOWED_TAGS))  # nh3 output is the sanitised HTML


@dataclass(frozen=True)
class DiffLine:
    kind: str  # equal, delete, insert, skip
    old_no: int | None
    new_no: int | None
    html: SafeString


def _segments_to_lines(segments: list[tuple[str, bool]]) -> list[list[tuple[str, bool]]]:
    """Split (text, changed) segments at newlines into one segment list per line."""
    lines: list[list[tuple[str, bool]]] = [[]]
    for text, changed in segments:
        parts = text.split("\n")
        for i, part in enumerate(parts):
            if i:
                lines.append([])
            if part:
                lines[-1].append((part, changed))
    if lines and not lines[-1]:
        lines.pop()  # the block ended with a newline
    return lines


def _line_html(segments: list[tuple[str, bool]], tag: str) -> SafeString:
    pieces = [f"<{tag}>{escape(text)}</{tag}>" if changed else str(escape(text)) for text, changed in segments]
    return mark_safe("".join(pieces))  # every piece above is escaped


def _changed_block(old: str, new: str) -> tuple[list[SafeString], list[SafeString]]:
    """A deleted block next to an inserted one: character diff, highlighted on both sides."""
    dmp = diff_match_patch()
    diffs = dmp.diff_main(old, new)
    dmp.diff_cleanupSemantic(diffs)
    old_segments = [(text, op == DELETE) for op, text in diffs if op != INSERT]
    new_segments = [(text, op == INSERT) for op, text in diffs if op != DELETE]
    return ([_line_html(s, "del") for s in _segments_to_lines(old_segments)],
            [_line_html(s, "ins") for s in _segments_to_lines(new_segments)])


def _plain(text: str) -> list[SafeString]:
    return [_line_html(s, "span") for s in _segments_to_lines([(text, False)])]


def line_diff(old: str, new: str, *, context: int = 3) -> list[DiffLine]:
    """Line-mode diff (diff-match-patch), then character highlights inside each changed block.

    Unchanged runs longer than 2 × `context` lines are folded into one `skip` line.
    """
    dmp = diff_match_patch()
    old_chars, new_chars, line_array = dmp.diff_linesToChars(old, new)
    diffs = dmp.diff_main(old_chars, new_chars, False)
    dmp.diff_charsToLines(diffs, line_array)
    out: list[DiffLine] = []
    old_no = new_no = 1
    i = 0
    while i < len(diffs):
        op, text = diffs[i]
        if op == EQUAL:
            lines = _plain(text)
            keep_head = context if out else 0
            keep_tail = context if i + 1 < len(diffs) else 0
            if len(lines) > keep_head + keep_tail + 1:
                for n, html in enumerate(lines[:keep_head]):
                    out.append(DiffLine("equal", old_no + n, new_no + n, html))
                hidden = len(lines) - keep_head - keep_tail
                out.append(DiffLine("skip", None, None, mark_safe(f"… {hidden} unchanged line(s)")))
                tail_start = len(lines) - keep_tail
                for n, html in enumerate(lines[tail_start:], start=tail_start):
                    out.append(DiffLine("equal", old_no + n, new_no + n, html))
            else:
                for n, html in enumerate(lines):
                    out.append(DiffLine("equal", old_no + n, new_no + n, html))
            old_no += len(lines)
            new_no += len(lines)
            i += 1
            continue
        deleted = text if op == DELETE else ""
        inserted = text if op == INSERT else ""
        if op == DELETE and i + 1 < len(diffs) and diffs[i + 1][0] == INSERT:
            inserted = diffs[i + 1][1]
            i += 1
        if deleted and inserted:
            old_lines, new_lines = _changed_block(deleted, inserted)
        else:
            old_lines, new_lines = _plain(deleted), _plain(inserted)
        for html in old_lines:
            out.append(DiffLine("delete", old_no, None, html))
            old_no += 1
        for html in new_lines:
            out.append(DiffLine("insert", None, new_no, html))
            new_no += 1
        i += 1
    return out


@dataclass(frozen=True)
class SideBySideRow:
    kind: str  # equal, change (a deleted line beside an inserted one), delete, insert, skip
    old: DiffLine | None
    new: DiffLine | None


def side_by_side(lines: list[DiffLine]) -> list[SideBySideRow]:
    """The lines of `line_diff` in two columns: each run of deleted lines beside the inserted run after it."""
    rows: list[SideBySideRow] = []
    deleted: list[DiffLine] = []
    inserted: list[DiffLine] = []

    def flush():
        for n in range(max(len(deleted), len(inserted))):
            old = deleted[n] if n < len(deleted) else None
            new = inserted[n] if n < len(inserted) else None
            rows.append(SideBySideRow("change" if old and new else "delete" if old else "insert", old, new))
        deleted.clear()
        inserted.clear()

    for line in lines:
        if line.kind == "delete":
            if inserted:
                flush()
            deleted.append(line)
        elif line.kind == "insert":
            inserted.append(line)
        else:
            flush()
            rows.append(SideBySideRow(line.kind, line, line))
    flush()
    return rows
