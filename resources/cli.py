"""What the resource commands share: the --agent/--scope flags, error reporting and plain tables."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from fermix_site.conf import conf
from resources.catalog import check_type, display_name, is_file_backed
from resources.errors import ResourceError
from resources.services import resource_sync_files


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be 1 or more")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


class ResourceCommand(BaseCommand):
    """A command that targets one agent; a refused operation becomes a clear error and exit status 1."""

    scoped = False  # accepts --scope (checkpoint conversation key)

    def add_arguments(self, parser):
        parser.add_argument("--agent", metavar="ID", help="agent id (default: the configured agent_id)")
        if self.scoped:
            parser.add_argument("--scope", metavar="KEY", help="conversation key of a checkpoint resource")

    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except ResourceError as exc:
            raise CommandError(exc.message) from exc

    def agent(self, options) -> str:
        return options.get("agent") or conf.memory.agent_id

    def sync(self, agent_id: str, resource_type: str | None = None) -> None:
        """Record hand edits of the files first, so what is shown is what is on disk."""
        if resource_type is not None and not is_file_backed(check_type(resource_type)):
            return
        types = None if resource_type is None else (resource_type,)
        for revision in resource_sync_files(agent_id=agent_id, types=types, why="command"):
            self.stderr.write(f"recorded {display_name(revision.resource_type)} as found on disk: "
                              f"r{revision.revision} ({revision.mutation_source})")


def when(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def table(headers: list[str], rows: list[list]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(isinstance(r[i], int) or r[i] == "-" for r in rows)
               and any(isinstance(r[i], int) for r in rows) for i in range(len(headers))]

    def line(values):
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in cells)])


def short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _compact(key: str, value) -> str:
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12]  # a SHA-256: the prefix is enough to tell revisions apart
    if key == "path" and isinstance(value, str):
        try:
            return str(Path(value).relative_to(conf.home))
        except ValueError:
            return value
    return value if isinstance(value, str | int | float) else json.dumps(value)


def provenance_text(provenance: dict, width: int = 72) -> str:
    return short(" ".join(f"{k}={_compact(k, v)}" for k, v in provenance.items()), width) or "-"
