"""The one writer of `$FERMIX_HOME/config.toml`: the setup command and the settings page both go through it.

The file is someone's hand-edited configuration, so it is edited, never regenerated: tomlkit changes the
values asked for and keeps comments, layout and every other key. Writers take turns under an exclusive
lock, and the new text must load with the start-up parsers before it replaces the old file in one rename.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import tomllib
from collections.abc import Mapping, MutableMapping
from pathlib import Path

import tomlkit
from tomlkit.container import Container
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import InlineTable, Table

from fermix_site.conf import INFINITY, SECTIONS, ConfigError, conf, load

HEADER = (
    "# Fermix configuration. Every key is optional and has a default; see docs/configuration.md.\n"
    "# `python manage.py fermix_setup` and the settings page change only the keys they set; comments are kept.\n\n"
)
LOCK_NAME = ".config.toml.lock"


def _toml_value(value):
    if value is None:  # what the parsers make of "infinity"
        return INFINITY
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _table(parent: MutableMapping, name: str, dotted: str) -> MutableMapping:
    """`parent[name]`, added when missing: inline inside an inline table, a `[dotted]` table otherwise."""
    if name not in parent:
        inline = isinstance(parent, InlineTable)
        # `[fermix_core]` itself stays implicit: its sub-tables get the headers.
        parent[name] = tomlkit.inline_table() if inline else tomlkit.table(is_super_table="." not in dotted)
    table = parent[name]
    if not isinstance(table, MutableMapping):
        raise ConfigError(f"[{dotted}] must be a table")
    return table


def _is_last(container: Container, table: Table) -> bool:
    """Whether nothing but blank lines and comments follows `table` in `container`."""
    items = [item for key, item in container.body if key is not None]
    last = items[-1] if items else None
    return last is table or isinstance(last, Table) and _is_last(last.value, table)


def set_keys(text: str, values: Mapping[str, object]) -> str:
    """`text` with each `"section.key": value` set in `[fermix_core.<section>]`; the rest as it was.

    A key already there is changed where it stands (inline tables and dotted keys included, its comment
    kept); a new key goes at the end of its table, a new table after the other `[fermix_core.*]` tables.
    """
    if text and not text.endswith("\n"):
        text += "\n"
    try:
        doc = tomlkit.parse(text)
        added = []
        for name, value in values.items():
            section, _, key = name.partition(".")
            core = _table(doc, "fermix_core", "fermix_core")
            is_new = section not in core
            table = _table(core, section, f"fermix_core.{section}")
            table[key] = _toml_value(value)
            if is_new and isinstance(table, Table):
                added.append(table)
        # New tables are written together and tomlkit puts a blank line before each; after the last one
        # there is none, so add it when another table follows.
        if added and not _is_last(doc, added[-1]):
            added[-1].add(tomlkit.nl())
        return tomlkit.dumps(doc)
    except (TOMLKitError, ValueError) as exc:  # tomlkit's ParseError is a ValueError too
        raise ConfigError(f"config.toml is not valid TOML or cannot be edited: {exc}") from None


def _parsed(values: Mapping[str, object]) -> dict[str, object]:
    parsed = {}
    for name, value in values.items():
        section, _, key = name.partition(".")
        parse = SECTIONS.get(section, {}).get(key)
        if parse is None:
            raise ConfigError(f"fermix_core.{name} is not a known key")
        parsed[name] = parse(f"fermix_core.{name}", value)
    return parsed


def _check_read_back(text: str, parsed: Mapping[str, object]) -> None:
    try:
        core = tomllib.loads(text).get("fermix_core", {})
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config.toml would not be valid TOML after the change: {exc}") from None
    for name, value in parsed.items():
        section, _, key = name.partition(".")
        table = core.get(section, {})
        if key not in table or SECTIONS[section][key](f"fermix_core.{name}", table[key]) != value:
            raise ConfigError(f"config.toml sets fermix_core.{name} in a way that cannot be edited; "
                              "edit the file by hand")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return HEADER
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_checked(path: Path, text: str) -> None:
    """Write `text` beside `path`, load it exactly as start-up would, then rename it over `path`."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    # A private folder in the same directory: start-up's loader reads `<home>/config.toml` by name, and
    # a rename from there to the real file stays on one filesystem.
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".config-check.") as folder:
        temp = Path(folder) / path.name
        with open(temp, "x", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(temp, mode)
        load({**os.environ, "FERMIX_HOME": folder})
        os.replace(temp, path)
    _fsync_dir(path.parent)


def config_set(values: Mapping[str, object], *, home: Path | None = None) -> Path:
    """Set {"memory.review_interval_hours": 6, …} in config.toml and return its path.

    Each value is parsed as start-up parses it; the edited file must read back with those values and load
    cleanly, or ConfigError is raised and the file stays byte for byte as it was. A missing file is
    created with a short header.
    """
    parsed = _parsed(values)
    home = Path(home or conf.home)
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = home / "config.toml"
    with open(home / LOCK_NAME, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two writers at once: one after the other, neither key lost
        text = _read(path)
        new_text = set_keys(text, parsed)
        _check_read_back(new_text, parsed)
        _replace_checked(path, new_text)
    return path
