"""A Telegram Bot API server on loopback for the bot's tests: `getMe`, `deleteWebhook`, long-polled
`getUpdates`, `sendMessage`, `sendChatAction`, `setMyCommands`.

    def test_it_replies(fake_telegram):
        fake_telegram.say(chat=dm(7), user=user(7, "Ana"), text="hi")
        assert fake_telegram.replies(7, count=1)[0] == "…"

The bot is pointed at it with its `TELEGRAM_API_BASE` (`fake_telegram.api_base`, the `…/bot` prefix the
token is appended to). Updates are queued by `say` and handed out by `getUpdates` in order, as
Telegram does: a `getUpdates` with `offset` confirms the updates before it. Everything the bot sends
is recorded in `sent`.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest

BOT_ID, BOT_USERNAME = 4000, "fermix_test_bot"
BOT_USER = {"id": BOT_ID, "is_bot": True, "first_name": "Fermix", "username": BOT_USERNAME,
            "can_join_groups": True, "can_read_all_group_messages": True, "supports_inline_queries": False}
MAX_POLL_SECONDS = 1.0  # a long poll answers [] at least this often, so a stopping bot is never held up


def dm(user_id: int) -> dict:
    return {"id": user_id, "type": "private", "first_name": f"user{user_id}"}


def group(chat_id: int, title: str = "Friends") -> dict:
    return {"id": chat_id, "type": "supergroup", "title": title}


def user(user_id: int, first_name: str, username: str | None = None) -> dict:
    return {"id": user_id, "is_bot": False, "first_name": first_name, **({"username": username} if username else {})}


@dataclass
class Sent:
    method: str
    params: dict

    @property
    def chat_id(self) -> int | None:
        value = self.params.get("chat_id")
        return int(value) if value is not None else None


class FakeTelegram:
    def __init__(self, token: str = "4000:fake-token"):
        self.token = token
        self.updates: list[dict] = []
        self.sent: list[Sent] = []
        self.confirmed = 0  # the highest offset the bot asked for: updates below it are handled
        self._ids = itertools.count(1)
        self._message_ids = itertools.count(100)
        self._changed = threading.Condition()
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> FakeTelegram:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/bot"

    # --- what the people in the chats do ---------------------------------------------------------

    def say(self, *, chat: dict, user: dict, text: str, reply_to_bot: bool = False) -> int:
        """Queue a message as Telegram would deliver it; commands get their `bot_command` entity."""
        message = {"message_id": next(self._message_ids), "date": int(time.time()), "chat": chat, "from": user,
                   "text": text}
        if text.startswith("/"):
            message["entities"] = [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}]
        if reply_to_bot:
            message["reply_to_message"] = {"message_id": 1, "date": int(time.time()), "chat": chat, "from": BOT_USER,
                                           "text": "earlier"}
        with self._changed:
            update_id = next(self._ids)
            self.updates.append({"update_id": update_id, "message": message})
            self._changed.notify_all()
        return update_id

    def redeliver(self, update_id: int) -> int:
        """Deliver an update's message again under a new update id, as Telegram does when a bot stopped
        before confirming it."""
        with self._changed:
            message = next(u["message"] for u in self.updates if u["update_id"] == update_id)
            again = next(self._ids)
            self.updates.append({"update_id": again, "message": message})
            self._changed.notify_all()
        return again

    def messages_to(self, chat_id: int) -> list[str]:
        with self._changed:
            return [s.params.get("text", "") for s in self.sent if s.method == "sendMessage" and s.chat_id == chat_id]

    def replies(self, chat_id: int, *, count: int, timeout: float = 120) -> list[str]:
        """The first `count` texts the bot sent to the chat, once it has sent them (the timeout only bounds
        a broken run)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.messages_to(chat_id)) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"the bot sent {self.messages_to(chat_id)} to {chat_id}, not {count} texts")
                self._changed.wait(remaining)
            return self.messages_to(chat_id)[:count]

    def handled(self, update_id: int, timeout: float = 120) -> None:
        """Wait until the bot confirmed the update (asked for the ones after it)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.confirmed <= update_id:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"the bot did not confirm update {update_id}")
                self._changed.wait(remaining)

    # --- the Bot API -----------------------------------------------------------------------------

    def answer(self, method: str, params: dict):
        if method == "getMe":
            return BOT_USER
        if method == "getUpdates":
            return self._poll(int(params.get("offset") or 0), float(params.get("timeout") or 0))
        if method == "sendMessage":
            with self._changed:
                self.sent.append(Sent(method, params))
                self._changed.notify_all()
            return {"message_id": next(self._message_ids), "date": int(time.time()), "from": BOT_USER,
                    "chat": {"id": int(params["chat_id"]), "type": "private"}, "text": params.get("text", "")}
        with self._changed:
            self.sent.append(Sent(method, params))
        return True  # deleteWebhook, sendChatAction, setMyCommands, close …

    def _poll(self, offset: int, timeout: float) -> list[dict]:
        deadline = time.monotonic() + min(timeout, MAX_POLL_SECONDS)
        with self._changed:
            if offset > self.confirmed:
                self.confirmed = offset
                self._changed.notify_all()
            while True:
                pending = [u for u in self.updates if u["update_id"] >= offset]
                remaining = deadline - time.monotonic()
                if pending or remaining <= 0:
                    return pending
                self._changed.wait(remaining)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeTelegram
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        prefix, _, method = self.path.partition("/bot")[2].partition("/")
        if prefix != self.fake.token:
            return self._send(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
        result = self.fake.answer(method, _params(self.headers.get("content-type", ""), raw))
        self._send(200, {"ok": True, "result": result})

    do_GET = do_POST

    def _send(self, status: int, data: dict) -> None:
        body = json.dumps(data).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the bot stopped in the middle of a long poll


def _params(content_type: str, raw: bytes) -> dict:
    if "json" in content_type:
        return json.loads(raw or b"{}")
    return {name: values[-1] for name, values in parse_qs(raw.decode()).items()}


@pytest.fixture
def fake_telegram():
    with FakeTelegram() as server:
        yield server
