"""`python -m examples.telegram_bot`: run the bot until Ctrl-C (settings: examples/telegram_bot/README.md)."""

import logging
import sys

from examples.telegram_bot.bot import build
from examples.telegram_bot.config import Config, ConfigError


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per long poll otherwise
    try:
        config = Config.from_env()
    except ConfigError as exc:
        print(f"telegram_bot: {exc}", file=sys.stderr)
        return 2
    build(config).run_polling()
    return 0


if __name__ == "__main__":
    sys.exit(main())
