"""First-run set-up: the few answers the wizard asks for, written to `$FERMIX_HOME/config.toml`."""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path

from fermix_site import conf as conf_module
from fermix_site.conf import COMPACTION_KEYS, MEMORY_KEYS, ConfigError, conf
from resources import files

HEADER = (
    "# Fermix configuration. Every key is optional and has a default; see docs/configuration.md.\n"
    "# `python manage.py fermix_setup` rewrites the keys it asks about (comments are not kept).\n\n"
)
BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def parse_review_interval(text) -> float:
    return MEMORY_KEYS["review_interval_hours"]("review interval (hours)", text)


def parse_threshold(text) -> float:
    return COMPACTION_KEYS["threshold"]("compaction threshold", text)


def _key(name: str) -> str:
    return name if BARE_KEY.match(name) else json.dumps(name)


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"cannot write {value!r} to config.toml")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise ConfigError(f"cannot write a {type(value).__name__} to config.toml")


def dump_toml(data: dict) -> str:
    """TOML for the plain tables Fermix reads (tables of strings, numbers, booleans and lists)."""
    lines: list[str] = []

    def emit(prefix: str, table: dict) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        if scalars and prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{_key(k)} = {_value(v)}" for k, v in scalars.items())
        if scalars:
            lines.append("")
        for name, sub in table.items():
            if isinstance(sub, dict):
                emit(f"{prefix}.{_key(name)}" if prefix else _key(name), sub)

    emit("", data)
    return "\n".join(lines).rstrip("\n") + "\n"


def _read_raw(path: Path) -> dict:
    if not path.exists():
        return {}
    return tomllib.loads(path.read_text(encoding="utf-8"))


def config_write(*, review_interval_hours: float, compaction_threshold: float) -> Path:
    """Set the wizard's keys in config.toml, keeping every other key; the result must load cleanly."""
    path = conf.config_path
    raw = _read_raw(path)
    core = raw.setdefault("fermix_core", {})
    core.setdefault("memory", {})["review_interval_hours"] = parse_review_interval(review_interval_hours)
    core.setdefault("compaction", {})["threshold"] = parse_threshold(compaction_threshold)
    text = HEADER + dump_toml(raw)
    if tomllib.loads(text) != raw:
        raise ConfigError("config.toml would not read back as written; it was left unchanged")
    previous = files.read_bytes(path)
    files.write_atomic(path, text.encode("utf-8"))
    try:
        conf_module.load()
    except ConfigError:
        files.restore(path, previous)
        raise
    return path
