"""The web setup page's writes to `$FERMIX_HOME/config.toml`: the setup wizard's knobs, nothing else.

The file is edited as text, one `key = value` line at a time, so comments and every other key stay as
they are. The new text is loaded with the same parsers as at start-up before it replaces the old file
(temp file + rename in the same folder); every process picks it up through `conf.get()`.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from fermix_site.conf import COMPACTION_KEYS, MEMORY_KEYS, ConfigError, conf, load


@dataclass(frozen=True)
class Knob:
    section: str
    key: str
    label: str
    help: str

    @property
    def env_name(self) -> str:
        return f"FERMIX_{self.section.upper()}_{self.key.upper()}"

    def parse(self, value):
        keys = MEMORY_KEYS if self.section == "memory" else COMPACTION_KEYS
        return keys[self.key](f"fermix_core.{self.section}.{self.key}", value)


KNOBS = (
    Knob("memory", "review_interval_hours", "Review interval (hours)",
         "How often the background reviewer may run per conversation; 0 turns background review off "
         "(review --now still works)."),
    Knob("compaction", "threshold", "Compaction threshold",
         "Share of the model's context window (0.1 to 1.0) at which a conversation is compacted."),
)


def _literal(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def set_key(text: str, section: str, key: str, value) -> str:
    """`text` with `key = value` set in `[fermix_core.<section>]`: the line replaced, or added to the table."""
    header = re.compile(rf"^\s*\[\s*fermix_core\s*\.\s*{re.escape(section)}\s*\]\s*(#.*)?$")
    any_header = re.compile(r"^\s*\[")
    assignment = re.compile(rf"^\s*{re.escape(key)}\s*=")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    new_line = f"{key} = {_literal(value)}\n"
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        gap = "\n" if lines and lines[-1].strip() else ""
        return "".join(lines) + f"{gap}[fermix_core.{section}]\n{new_line}"
    end = next((i for i in range(start + 1, len(lines)) if any_header.match(lines[i])), len(lines))
    for i in range(start + 1, end):
        if assignment.match(lines[i]):
            lines[i] = new_line
            return "".join(lines)
    lines.insert(start + 1, new_line)
    return "".join(lines)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_settings(values: dict[str, object], home: Path | None = None) -> Path:
    """Write {"memory.review_interval_hours": 6, …} into config.toml; raise ConfigError if it would not load.

    Only keys of KNOBS are accepted. The edited text must parse back to the requested values and load
    with the start-up parsers before it replaces the file.
    """
    home = Path(home or conf.home)
    path = home / "config.toml"
    knobs = {f"{k.section}.{k.key}": k for k in KNOBS}
    lock_path = home / ".config.toml.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two operators saving at once: one after the other
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        for name, value in values.items():
            knob = knobs[name]
            text = set_key(text, knob.section, knob.key, knob.parse(value))
        _check(text, values, knobs)
        fd, temp = tempfile.mkstemp(prefix=".config.toml.", dir=home)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(temp, path.stat().st_mode & 0o777 if path.exists() else 0o600)
            _load_text_check(home, temp)
            os.replace(temp, path)
            _fsync_dir(home)
        except BaseException:
            if os.path.exists(temp):
                os.unlink(temp)
            raise
    return path


def _check(text: str, values: dict, knobs: dict) -> None:
    try:
        core = tomllib.loads(text).get("fermix_core", {})
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config.toml would not be valid TOML after the change: {exc}") from None
    for name, value in values.items():
        knob = knobs[name]
        if core.get(knob.section, {}).get(knob.key) != knob.parse(value):
            raise ConfigError(f"config.toml sets fermix_core.{name} in a way the web setup cannot edit; "
                              "edit the file by hand")


def _load_text_check(home: Path, temp: str) -> None:
    """Load the new text exactly as start-up would, from a private folder beside the real file."""
    with tempfile.TemporaryDirectory(dir=home, prefix=".setup-check.") as folder:
        os.link(temp, Path(folder) / "config.toml")
        load({**os.environ, "FERMIX_HOME": folder})


def overridden_by_environment() -> list[str]:
    """Knobs whose environment variable wins over config.toml (the page says so)."""
    return [k.env_name for k in KNOBS if k.env_name in os.environ]
