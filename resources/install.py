"""First-run set-up: the few answers the wizard asks for, written to `$FERMIX_HOME/config.toml`."""

from __future__ import annotations

from pathlib import Path

from fermix_site.conf import COMPACTION_KEYS, MEMORY_KEYS
from fermix_site.config_file import config_set


def parse_review_interval(text) -> float:
    return MEMORY_KEYS["review_interval_hours"]("review interval (hours)", text)


def parse_threshold(text) -> float:
    return COMPACTION_KEYS["threshold"]("compaction threshold", text)


def config_write(*, review_interval_hours: float, compaction_threshold: float) -> Path:
    """Set the wizard's keys in config.toml, keeping every other key and comment; the result must load cleanly."""
    return config_set({"memory.review_interval_hours": review_interval_hours,
                       "compaction.threshold": compaction_threshold})
