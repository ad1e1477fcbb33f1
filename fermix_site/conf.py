"""Every Fermix setting with its default, read once.

Sources, later ones winning: the defaults below, `$FERMIX_HOME/config.toml`, then environment variables
named `FERMIX_<SECTION>_<KEY>` (for example `FERMIX_MEMORY_REVIEW_INTERVAL_HOURS=6`,
`FERMIX_COMPACTION_THRESHOLD=0.9`). Code reads `conf.X`; it never reads the TOML dict or raw settings.
Invalid values raise `ConfigError` naming the key and what is allowed.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# Written so that Python and the OpenAPI document's (JavaScript) regular expressions read it the same.
ID_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9_.-]{1,64}$"
ID_RE = re.compile(ID_PATTERN)
INFINITY = "infinity"


class ConfigError(ImproperlyConfigured):
    """A configuration value is missing, of the wrong type or out of range."""


def valid_id(value: str) -> bool:
    """Agent and owner ids become path parts: a strict charset, never `.` or `..`."""
    return isinstance(value, str) and bool(ID_RE.fullmatch(value))


@dataclass(frozen=True)
class MemoryConf:
    enabled: bool = True
    agent_id: str = "main"
    owner_id: str = "default"
    review_interval_hours: float = 24
    review_max_messages: int = 40
    review_input_token_budget: int = 4000
    review_failure_backoff_ms: int = 300_000
    prompt_user_token_cap: int = 1500
    prompt_memory_token_cap: int = 2000
    max_conversation_history: int | None = None  # None is "infinity"
    persist_transcripts: bool = False
    # USER.md in group and channel chats and for guest speakers: true/false, or per agent
    # (`{ main = false, family = true }`, unnamed agents false).
    user_md_in_groups: bool | dict = False
    directive_approval: bool = False  # the reviewer's directive changes wait for the owner (memory.rows)

    def user_md_shown_to_others(self, agent_id: str) -> bool:
        if isinstance(self.user_md_in_groups, dict):
            return self.user_md_in_groups.get(agent_id, False)
        return self.user_md_in_groups


@dataclass(frozen=True)
class CompactionConf:
    enabled: bool = True
    threshold: float = 0.85
    reasoning_effort: str = "medium"


@dataclass(frozen=True)
class ProviderConf:
    name: str
    kind: str
    base_url: str
    model: str
    api_key_env: str | None = None
    context_window: int = 128_000
    primary: bool = False

    @property
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True)
class TimeoutsConf:
    llm_buffered_ms: int = 240_000
    turn_ms: int = 300_000  # a whole turn: every model call and tool round; past it the turn answers 504


@dataclass(frozen=True)
class StorageConf:
    durability: str = "normal"  # "full": SQLite syncs the WAL at every commit (read at start-up)
    min_free_mb: int = 32  # below this much free space under FERMIX_HOME, /healthz reports storage full

    @property
    def min_free_bytes(self) -> int:
        return self.min_free_mb * 1024 * 1024


@dataclass(frozen=True)
class EmbeddingsConf:
    """How message and memory text becomes vectors for semantic recall (memory.embeddings)."""

    backend: str = "local"  # "local": a model shipped in a Python package; "openai": /v1/embeddings; "none"
    model: str = ""  # local: a model name (default all-MiniLM-L6-v2-int8); openai: required
    base_url: str | None = None  # openai only
    api_key_env: str | None = None  # openai only
    dimensions: int | None = None  # openai only: asked of the server and checked in its answers
    batch: int | None = None  # texts per model run (local, default 8) or per request (openai, default 32)
    threads: int = 1  # local only: onnxruntime intra-op threads
    timeout_ms: int = 10_000  # openai only: one request
    exact_max_vectors: int = 100_000  # a scope with more vectors is searched by the approximate index

    @property
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True)
class MirrorsConf:
    """Each node's copies of the prompt files (`resources.mirrors`)."""

    interval_s: int = 15  # the node heartbeat: mirrors rewritten, hand edits recorded, refused tasks queued


@dataclass(frozen=True)
class Config:
    home: Path
    memory: MemoryConf = field(default_factory=MemoryConf)
    compaction: CompactionConf = field(default_factory=CompactionConf)
    providers: tuple[ProviderConf, ...] = ()
    timeouts: TimeoutsConf = field(default_factory=TimeoutsConf)
    storage: StorageConf = field(default_factory=StorageConf)
    embeddings: EmbeddingsConf = field(default_factory=EmbeddingsConf)
    mirrors: MirrorsConf = field(default_factory=MirrorsConf)

    @property
    def config_path(self) -> Path:
        return self.home / "config.toml"

    @property
    def db_path(self) -> Path:
        return self.home / "memory.db"

    def memory_dir(self, agent_id: str) -> Path:
        return self.home / "memory" / _checked_id(agent_id, "agent_id")

    def bootstrap_dir(self, agent_id: str) -> Path:
        return self.home / "bootstrap" / _checked_id(agent_id, "agent_id")

    @property
    def provider_chain(self) -> tuple[ProviderConf, ...]:
        """The primary first, then the fallbacks in file order."""
        return tuple(sorted(self.providers, key=lambda p: not p.primary))


def _checked_id(value: str, key: str) -> str:
    if not valid_id(value):
        raise ConfigError(f"{key} {value!r} is invalid: use 1-64 of A-Z a-z 0-9 _ . - (not '.' or '..')")
    return value


# --- value parsers: each takes the key's dotted name for its message -------------------------------


def _bool(key, value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
        return value.lower() in {"1", "true", "yes", "on"}
    raise ConfigError(f"{key} must be true or false, got {value!r}")


def _number(key, value, kind, lo, hi):
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a number from {lo} to {hi}, got {value!r}")
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a number from {lo} to {hi}, got {value!r}") from None
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise ConfigError(f"{key} must be a whole number from {lo} to {hi}, got {value!r}")
    if isinstance(number, float) and not math.isfinite(number) or not lo <= number <= hi:
        raise ConfigError(f"{key} must be from {lo} to {hi}, got {value!r}")
    return number


def _int(lo, hi):
    return lambda key, value: _number(key, value, int, lo, hi)


def _float(lo, hi):
    return lambda key, value: _number(key, value, float, lo, hi)


def _choice(*allowed):
    def parse(key, value):
        if value not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value

    return parse


def _ident(key, value):
    if not valid_id(value):
        raise ConfigError(f"{key} must be 1-64 of A-Z a-z 0-9 _ . - (not '.' or '..'), got {value!r}")
    return value


def _bool_or_per_agent(key, value):
    if not isinstance(value, dict):
        return _bool(key, value)
    return {_ident(f"{key} (an agent id)", agent): _bool(f"{key}.{agent}", flag) for agent, flag in value.items()}


def _history(key, value):
    if isinstance(value, str) and value.strip().lower() in {INFINITY, "inf"}:
        return None
    return _int(1, 10**9)(key, value)


def _text(key, value):
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return value.strip()


def _url(key, value):
    value = _text(key, value)
    if not re.match(r"^https?://[^\s/]+", value):
        raise ConfigError(f"{key} must be an http:// or https:// URL, got {value!r}")
    return value.rstrip("/")


MEMORY_KEYS = {
    "enabled": _bool,
    "agent_id": _ident,
    "owner_id": _ident,
    "review_interval_hours": _float(0, 24 * 365),
    "review_max_messages": _int(1, 1000),
    "review_input_token_budget": _int(100, 1_000_000),
    "review_failure_backoff_ms": _int(0, 7 * 24 * 3600 * 1000),
    "prompt_user_token_cap": _int(1, 1_000_000),
    "prompt_memory_token_cap": _int(1, 1_000_000),
    "max_conversation_history": _history,
    "persist_transcripts": _bool,
    "user_md_in_groups": _bool_or_per_agent,
    "directive_approval": _bool,
}
COMPACTION_KEYS = {
    "enabled": _bool,
    "threshold": _float(0.1, 1.0),
    "reasoning_effort": _choice("minimal", "low", "medium", "high"),
}
TIMEOUT_KEYS = {"llm_buffered_ms": _int(1000, 3_600_000), "turn_ms": _int(1000, 3_600_000)}
STORAGE_KEYS = {"durability": _choice("normal", "full"), "min_free_mb": _int(0, 10**7)}
EMBEDDINGS_KEYS = {
    "backend": _choice("local", "openai", "none"),
    "model": _text,
    "base_url": _url,
    "api_key_env": _text,
    "dimensions": _int(1, 65_536),
    "batch": _int(1, 2048),
    "threads": _int(1, 64),
    "timeout_ms": _int(100, 600_000),
    "exact_max_vectors": _int(10, 10_000_000),
}
PROVIDER_KEYS = {
    "kind": _choice("openai", "anthropic"),
    "base_url": _url,
    "model": _text,
    "api_key_env": _text,
    "context_window": _int(1024, 100_000_000),
    "primary": _bool,
}
MIRRORS_KEYS = {"interval_s": _int(1, 3600)}
SECTIONS = {"memory": MEMORY_KEYS, "compaction": COMPACTION_KEYS, "timeouts": TIMEOUT_KEYS,
            "storage": STORAGE_KEYS, "embeddings": EMBEDDINGS_KEYS, "mirrors": MIRRORS_KEYS}


def _section(name: str, raw: dict, keys: dict, environ) -> dict:
    if not isinstance(raw, dict):
        raise ConfigError(f"[fermix_core.{name}] must be a table")
    unknown = set(raw) - set(keys)
    if unknown:
        raise ConfigError(f"fermix_core.{name}.{sorted(unknown)[0]} is not a known key "
                          f"(known: {', '.join(keys)})")
    values = {}
    for key, parse in keys.items():
        env_name = f"FERMIX_{name.upper()}_{key.upper()}"
        if env_name in environ:
            values[key] = parse(env_name, environ[env_name])
        elif key in raw:
            values[key] = parse(f"fermix_core.{name}.{key}", raw[key])
    return values


def _providers(raw: dict) -> tuple[ProviderConf, ...]:
    if not isinstance(raw, dict):
        raise ConfigError("[fermix_core.providers] must be a table of provider tables")
    providers = []
    for name, table in raw.items():
        prefix = f"fermix_core.providers.{name}"
        if not valid_id(name) or not isinstance(table, dict):
            raise ConfigError(f"{prefix} must be a table named with A-Z a-z 0-9 _ . -")
        unknown = set(table) - set(PROVIDER_KEYS)
        if unknown:
            raise ConfigError(f"{prefix}.{sorted(unknown)[0]} is not a known key")
        for required in ("kind", "base_url", "model"):
            if required not in table:
                raise ConfigError(f"{prefix}.{required} is required")
        values = {k: PROVIDER_KEYS[k](f"{prefix}.{k}", v) for k, v in table.items()}
        providers.append(ProviderConf(name=name, **values))
    primaries = [p.name for p in providers if p.primary]
    if providers and len(primaries) != 1:
        raise ConfigError(f"fermix_core.providers: exactly one provider must have primary = true "
                          f"(found {len(primaries)})")
    return tuple(providers)


def _embeddings(values: dict) -> EmbeddingsConf:
    embeddings = EmbeddingsConf(**values)
    if embeddings.backend == "openai":
        for required in ("base_url", "model"):
            if not getattr(embeddings, required):
                raise ConfigError(f"fermix_core.embeddings.{required} is required with backend = \"openai\"")
    return embeddings


def default_home(environ=None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("FERMIX_HOME") or Path.home() / ".fermix").expanduser().resolve()


def load(environ=None) -> Config:
    """Read defaults, then config.toml, then the environment; raise ConfigError on any bad value."""
    environ = os.environ if environ is None else environ
    home = default_home(environ)
    path = home / "config.toml"
    raw: dict = {}
    if path.exists():
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    core = raw.get("fermix_core", {})
    if not isinstance(core, dict):
        raise ConfigError("[fermix_core] must be a table")
    unknown = set(core) - set(SECTIONS) - {"providers"}
    if unknown:
        raise ConfigError(f"fermix_core.{sorted(unknown)[0]} is not a known section "
                          f"(known: {', '.join([*SECTIONS, 'providers'])})")
    sections = {name: _section(name, core.get(name, {}), keys, environ) for name, keys in SECTIONS.items()}
    return Config(
        home=home,
        memory=MemoryConf(**sections["memory"]),
        compaction=CompactionConf(**sections["compaction"]),
        providers=_providers(core.get("providers", {})),
        timeouts=TimeoutsConf(**sections["timeouts"]),
        storage=StorageConf(**sections["storage"]),
        embeddings=_embeddings(sections["embeddings"]),
        mirrors=MirrorsConf(**sections["mirrors"]),
    )


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when config.toml is written: inode (a rename), mtime and size; None when absent."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class _Current:
    """The configuration in force, behind one name: `from fermix_site.conf import conf`.

    `get()` looks at config.toml's stamp at most once per `check_interval` seconds and reloads when it
    changed, so a write by the web setup page reaches every process (web workers and the task cluster)
    without a restart. A changed file that no longer loads is logged and ignored until it changes again;
    only the first load raises. Inside `use()` the given configuration stays in force.
    """

    check_interval = 1.0

    def __init__(self):
        self._config: Config | None = None
        self._stamp: tuple | None = None
        self._checked_at = 0.0
        self._pinned = 0
        self._lock = threading.Lock()

    def _due(self) -> bool:
        return not self._pinned and time.monotonic() - self._checked_at >= self.check_interval

    def get(self) -> Config:
        if self._config is None or self._due():
            with self._lock:
                if self._config is None:
                    self._load()
                elif self._due():
                    self._refresh()
        return self._config

    def _load(self) -> Config:
        path = default_home() / "config.toml"
        stamp = _stamp(path)
        config = load()
        self._config, self._stamp, self._checked_at = config, stamp, time.monotonic()
        return config

    def _refresh(self) -> None:
        self._checked_at = time.monotonic()
        stamp = _stamp(self._config.config_path)
        if stamp == self._stamp:
            return
        try:
            self._load()
        except ConfigError as exc:
            self._stamp = stamp  # not retried until the file changes again
            logging.getLogger("fermix.conf").error("config.toml changed but was not reloaded: %s", exc)

    def reload(self) -> Config:
        """Re-read config.toml and the environment now (after the web setup page writes the file)."""
        with self._lock:
            return self._load()

    @contextmanager
    def use(self, config: Config):
        """Put another configuration in force for a block (tests)."""
        previous, self._config = self._config, config
        self._pinned += 1
        try:
            yield config
        finally:
            self._pinned -= 1
            self._config = previous

    def __getattr__(self, name):
        return getattr(self.get(), name)


conf = _Current()
