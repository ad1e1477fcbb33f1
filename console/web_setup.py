"""The web setup page's writes to `$FERMIX_HOME/config.toml`: the setup wizard's knobs, nothing else.

`fermix_site.config_file` does the writing (the setup command uses it too): comments and every other key
stay as they are, and the new text loads with the start-up parsers before it replaces the old file.
Every process picks it up through `conf.get()`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fermix_site.conf import COMPACTION_KEYS, MEMORY_KEYS, ConfigError
from fermix_site.config_file import config_set


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


def write_settings(values: dict[str, object], home: Path | None = None) -> Path:
    """Write {"memory.review_interval_hours": 6, …} into config.toml; raise ConfigError if it would not load.

    Only keys of KNOBS are accepted: the page changes the wizard's knobs and nothing else.
    """
    knobs = {f"{k.section}.{k.key}" for k in KNOBS}
    unknown = sorted(set(values) - knobs)
    if unknown:
        raise ConfigError(f"fermix_core.{unknown[0]} is not a setting of this page")
    return config_set(values, home=home)


def overridden_by_environment() -> list[str]:
    """Knobs whose environment variable wins over config.toml (the page says so)."""
    return [k.env_name for k in KNOBS if k.env_name in os.environ]
