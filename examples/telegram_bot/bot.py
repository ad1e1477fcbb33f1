"""A Telegram bot whose memory is Fermix: every chat is a conversation, the owner speaks as `operator`.

- A direct message, or a group message that mentions the bot or replies to it, is a turn through the
  service's provider chain (`POST …/turns`: the service stores the message, asks the model with the
  memory tools, stores the reply and commits it).
- Any other group message is appended (`POST …/messages`), so the bot knows what was said around it.
- `/prompt`, `/compact`, `/new`, `/clear` and `/soul …` are sent with the speaker's trust; the service
  refuses them to a guest and the bot says so.

Trust is decided here, once: the owner's Telegram id (config) is `operator`, everyone else `guest`.
The update's chat and message id make the Idempotency-Key, so an update Telegram delivers twice (the
bot stopped before confirming it) is stored and answered once.
"""

from __future__ import annotations

import logging

from fermix_client import APIError, AsyncClient, Forbidden, ModelUnavailable, TransportError
from telegram import Chat, Message, Update
from telegram.constants import ChatAction
from telegram.ext import Application, ApplicationBuilder, CommandHandler, ContextTypes, MessageHandler, filters

from examples.telegram_bot.config import Config

logger = logging.getLogger("telegram_bot")

TELEGRAM_LIMIT = 4096  # characters per message
OWNER_ONLY = "Only the owner can use {command} here."
UNAVAILABLE = "I can't reach my model right now; please try again in a moment."
UNREACHABLE = "My memory service is not answering right now; please try again in a moment."
HELP = ("I remember our conversations. Owner commands: /prompt, /compact, /new, /clear, "
        "/soul review | suggest <instruction> | revert <revision> | reset | apply <token> | deny <token>.")
SOUL_USAGE = "Usage: /soul review | suggest <instruction> | revert <revision> | reset | apply <token> | deny <token>"
CHAT_TYPES = {Chat.PRIVATE: "direct", Chat.GROUP: "group", Chat.SUPERGROUP: "group", Chat.CHANNEL: "channel"}


def conversation_of(message: Message) -> str:
    """`telegram:<chat id>`, with the forum topic as the thread scope when there is one."""
    if message.is_topic_message and message.message_thread_id:
        return f"telegram:{message.chat.id}:{message.message_thread_id}"
    return f"telegram:{message.chat.id}"


def idempotency_key(message: Message) -> str:
    return f"telegram:{message.chat.id}:{message.message_id}"


def sender_of(message: Message) -> str:
    user = message.from_user
    if user is None:
        return message.chat.title or ""
    return f"@{user.username}" if user.username else user.full_name


def chunks(text: str) -> list[str]:
    """Telegram takes at most 4096 characters a message; longer texts go as several."""
    text = text or "…"
    return [text[i:i + TELEGRAM_LIMIT] for i in range(0, len(text), TELEGRAM_LIMIT)]


class FermixBot:
    def __init__(self, config: Config):
        self.config = config
        self.fermix: AsyncClient | None = None

    # --- who is speaking, where ------------------------------------------------------------------

    def trust(self, message: Message) -> str:
        user = message.from_user
        return "operator" if user is not None and user.id == self.config.owner_telegram_id else "guest"

    @staticmethod
    def chat_type(message: Message) -> str:
        return CHAT_TYPES.get(message.chat.type, "group")

    def addressed(self, message: Message, bot_username: str) -> bool:
        """In a group the bot answers only when spoken to: a mention, or a reply to one of its messages."""
        if self.chat_type(message) == "direct":
            return True
        replied = message.reply_to_message
        if replied is not None and replied.from_user is not None and replied.from_user.username == bot_username:
            return True
        return f"@{bot_username}".lower() in (message.text or "").lower()

    # --- life cycle ------------------------------------------------------------------------------

    async def start(self, application: Application) -> None:
        self.fermix = AsyncClient(self.config.fermix_url, api_key=self.config.fermix_api_key,
                                  agent=self.config.agent)

    async def stop(self, application: Application) -> None:
        if self.fermix is not None:
            await self.fermix.aclose()

    # --- handlers --------------------------------------------------------------------------------

    async def on_text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        if message is None or not message.text:
            return
        common = {"sender": sender_of(message), "trust": self.trust(message), "chat_type": self.chat_type(message),
                  "idempotency_key": idempotency_key(message)}
        if not self.addressed(message, context.bot.username):
            await self.fermix.append(conversation_of(message), message.text, **common)
            return
        await context.bot.send_chat_action(message.chat.id, ChatAction.TYPING)
        answer = await self.fermix.turn(conversation_of(message), message.text, **common)
        await self.reply(message, "\n\n".join([*answer["notices"], answer["reply"]]))

    async def on_help(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        await self.reply(update.effective_message, HELP)

    async def on_prompt(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        # The composed prompt shows the owner's USER.md: it is the owner's to see, not a guest's.
        if self.trust(message) != "operator":
            await self.reply(message, OWNER_ONLY.format(command="/prompt"))
            return
        prompt = await self.fermix.prompt(conversation_of(message), chat_type=self.chat_type(message),
                                          trust="operator")
        system = "\n\n".join(m["content"] for m in prompt["system_messages"])
        await self.reply(message, f"prompt {prompt['prompt_hash'][:12]}, {len(prompt['history'])} messages of "
                                  f"history, parts: {', '.join(prompt['parts'])}\n\n{system}")

    async def on_compact(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        done = await self.fermix.compact(conversation_of(message), trust=self.trust(message))
        await self.reply(message, done["message"])

    async def on_clear(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        done = await self.fermix.clear(conversation_of(message), trust=self.trust(message))
        await self.reply(message, done["message"])

    async def on_soul(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, args = update.effective_message, list(context.args or [])
        trust = self.trust(message)
        mode = args[0] if args else ""
        if mode in ("apply", "deny") and len(args) == 2:
            decide = self.fermix.soul_apply if mode == "apply" else self.fermix.soul_deny
            decided = await decide(args[1], trust=trust)
            written = f" (SOUL.md revision {decided['revision']})" if decided.get("revision") else ""
            await self.reply(message, f"Proposal {decided['status']}{written}.")
            return
        if mode == "revert" and len(args) == 2 and args[1].isdigit():
            proposal = await self.fermix.soul_propose("revert", revision=int(args[1]), trust=trust)
        elif mode in ("review", "reset") and len(args) == 1 or mode == "suggest" and len(args) > 1:
            proposal = await self.fermix.soul_propose(mode, instruction=" ".join(args[1:]) or None, trust=trust)
        else:
            await self.reply(message, SOUL_USAGE)
            return
        await self.reply(message, f"{proposal['rationale']}\n\n{proposal['diff'] or '(no change)'}\n\n"
                                  f"/soul apply {proposal['token']} or /soul deny {proposal['token']}")

    async def on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Say what went wrong in the chat: a refusal, a model outage, a service that is away."""
        error, message = context.error, update.effective_message if isinstance(update, Update) else None
        if isinstance(error, Forbidden) and message is not None and (message.text or "").startswith("/"):
            text = OWNER_ONLY.format(command=message.text.split()[0].split("@")[0])
        elif isinstance(error, ModelUnavailable):
            text = UNAVAILABLE
        elif isinstance(error, TransportError):
            text = UNREACHABLE
        elif isinstance(error, APIError):
            text = f"That did not work: {error.message}"
        else:
            logger.error("update %s failed", update, exc_info=error)
            return
        logger.warning("update failed: %s", error)
        if message is not None:
            await self.reply(message, text)

    @staticmethod
    async def reply(message: Message, text: str) -> None:
        for part in chunks(text):
            await message.reply_text(part, do_quote=False)


def build(config: Config) -> Application:
    """The python-telegram-bot Application with the bot's handlers."""
    bot = FermixBot(config)
    application = (ApplicationBuilder().token(config.telegram_token).base_url(config.telegram_api_base)
                   .post_init(bot.start).post_shutdown(bot.stop).concurrent_updates(False).build())
    application.add_handler(CommandHandler(["start", "help"], bot.on_help))
    application.add_handler(CommandHandler("prompt", bot.on_prompt))
    application.add_handler(CommandHandler("compact", bot.on_compact))
    application.add_handler(CommandHandler(["new", "clear"], bot.on_clear))
    application.add_handler(CommandHandler("soul", bot.on_soul))
    application.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, bot.on_text))
    application.add_error_handler(bot.on_error)
    return application
