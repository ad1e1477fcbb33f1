"""The bot's settings, from the environment, each checked once at start-up."""

from __future__ import annotations

import os
from dataclasses import dataclass

TELEGRAM_API = "https://api.telegram.org/bot"


class ConfigError(Exception):
    """A setting is missing or malformed; the message names it."""


@dataclass(frozen=True)
class Config:
    telegram_token: str
    owner_telegram_id: int  # whose words carry operator trust: the agent's owner
    fermix_api_key: str
    fermix_url: str = "http://127.0.0.1:8000"
    agent: str = "main"
    telegram_api_base: str = TELEGRAM_API  # a local Bot API server (or a test's fake) instead of Telegram's

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Config:
        env = dict(os.environ if env is None else env)
        owner = _required(env, "TELEGRAM_OWNER_ID")
        if not owner.lstrip("-").isdigit():
            raise ConfigError(f"TELEGRAM_OWNER_ID must be the owner's numeric Telegram user id, not {owner!r}")
        return cls(telegram_token=_required(env, "TELEGRAM_TOKEN"), owner_telegram_id=int(owner),
                   fermix_api_key=_required(env, "FERMIX_API_KEY"),
                   fermix_url=env.get("FERMIX_URL") or cls.fermix_url, agent=env.get("FERMIX_AGENT") or cls.agent,
                   telegram_api_base=env.get("TELEGRAM_API_BASE") or cls.telegram_api_base)


def _required(env: dict[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigError(f"set {name} (see examples/telegram_bot/README.md)")
    return value
