"""The reference Telegram bot end to end: examples/telegram_bot/README.md's commands run as written, the bot
polling a fake Telegram Bot API on loopback, the real server (`manage.py serve`) with the fake model."""

import os
import shlex
import signal
import subprocess
import sys

import pytest

from tests.api.model_script import Script
from tests.clients.readme import commands
from tests.fakeprovider import FakeProvider, Reply, provider_config_toml, tool_call
from tests.faketelegram import BOT_USERNAME, FakeTelegram, dm, group, user
from tests.live import ROOT, LiveServer

pytestmark = [pytest.mark.slow, pytest.mark.live]

README = ROOT / "examples/telegram_bot/README.md"
OWNER, GUEST, STRANGER, GROUP = 7001, 7002, 7003, -100500
OWNER_USER, GUEST_USER = user(OWNER, "Ana", "ana"), user(GUEST, "Bo")
CLIENT_SRC = ROOT / "clients/python/src"


class Stack:
    """The fakes, the server and the bot, as the README starts them."""

    def __init__(self, tmp):
        self.provider = FakeProvider().start()
        self.provider.responder = self.script = Script()
        self.telegram = FakeTelegram().__enter__()
        self.server = LiveServer(tmp / "home", config=provider_config_toml(self.provider)).start()
        self.server.manage("fermix_setup", "--noinput")
        self.operator = self.server.key("ops", "operator")
        self.bot, self.log = None, tmp / "bot.log"
        self.site = tmp / "site"

    def run_readme(self):
        key = None
        for line in commands(README):
            argv = shlex.split(line)
            if argv[:2] == ["pip", "install"]:
                subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(self.site),
                                *argv[2:]], cwd=ROOT, check=True, timeout=300)
            elif argv[:2] == ["python", "manage.py"]:
                key = self.server.manage(*argv[2:]).stdout.strip().split()[-1]
            else:
                self.start_bot(argv, key)

    def start_bot(self, argv, key):
        settings = {"<bot-token>": self.telegram.token, "<your-telegram-id>": str(OWNER), "<key>": key}
        env = {**os.environ, "FERMIX_URL": self.server.base, "TELEGRAM_API_BASE": self.telegram.api_base,
               "PYTHONPATH": str(self.site)}
        while "=" in argv[0]:
            name, _, value = argv.pop(0).partition("=")
            env[name] = settings[value]
        assert argv[0] == "python", argv
        with open(self.log, "ab") as log:
            self.bot = subprocess.Popen([sys.executable, *argv[1:]], cwd=ROOT, env=env, stdout=log,
                                        stderr=subprocess.STDOUT)

    def window(self, conversation):
        with self.server.client(self.operator) as http:
            answer = http.get(f"/api/v1/agents/main/conversations/{conversation}/messages")
        return [(m["role"], m["content"], m["trust"], m["sender"]) for m in answer.json()["messages"]]

    def memories(self):
        with self.server.client(self.operator) as http:
            return http.get("/api/v1/agents/main/memories").json()["memories"]

    def stop(self):
        if self.bot is not None and self.bot.poll() is None:
            self.bot.send_signal(signal.SIGINT)
            try:
                self.bot.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.bot.kill()
        self.server.stop()
        self.telegram.__exit__(None, None, None)
        self.provider.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("telegram"))
    try:
        stack.run_readme()
        yield stack
    finally:
        stack.stop()


def said(stack, chat, speaker, text, count, **options):
    """Send a message and return every text the bot has sent to the chat, once there are `count`."""
    stack.telegram.say(chat=chat, user=speaker, text=text, **options)
    try:
        return stack.telegram.replies(chat["id"], count=count)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stack.log.read_text(errors='replace')[-3000:]}") from None


def test_a_direct_conversation_with_the_owner_is_remembered(stack):
    stack.script.push("turn", tool_call("memory_store", {"key": "home", "value": "lives in Lisbon",
                                                         "category": "identity"}), Reply(text="Noted, Ana."))
    assert said(stack, dm(OWNER), OWNER_USER, "I live in Lisbon.", 1) == ["Noted, Ana."]
    stack.script.push("turn", Reply(text="In Lisbon."))
    assert said(stack, dm(OWNER), OWNER_USER, "Where do I live?", 2)[-1] == "In Lisbon."
    assert stack.window(f"telegram:{OWNER}") == [
        ("user", "I live in Lisbon.", "operator", "@ana"), ("assistant", "Noted, Ana.", "operator", "main"),
        ("user", "Where do I live?", "operator", "@ana"), ("assistant", "In Lisbon.", "operator", "main")]
    home = [row for row in stack.memories() if row["key"] == "home"]
    assert [(row["value"], row["scope_type"]) for row in home] == [("lives in Lisbon", "owner")]
    # The second turn's model saw the first exchange and the owner's USER.md.
    request = stack.script.requests("turn")[-1].body
    system = [m for m in request["messages"] if m["role"] == "system"]
    assert "lives in Lisbon" in str(system) and request["tools"]


def test_a_group_conversation_records_everyone_and_answers_when_spoken_to(stack):
    chat = group(GROUP)
    update = stack.telegram.say(chat=chat, user=GUEST_USER, text="Anyone up for lunch?")
    stack.telegram.handled(update)
    assert stack.telegram.messages_to(GROUP) == []  # not spoken to: recorded, not answered
    note = {"key": "name", "value": "is called Bo", "category": "identity"}
    stack.script.push("turn", tool_call("memory_store", note), Reply(text="Lunch sounds good, Bo."))
    assert said(stack, chat, GUEST_USER, f"@{BOT_USERNAME} what do you think?", 1) == ["Lunch sounds good, Bo."]
    assert said(stack, chat, GUEST_USER, "And dessert?", 2, reply_to_bot=True)[-1] == "ok"  # a reply to the bot
    assert stack.window(f"telegram:{GROUP}")[:3] == [
        ("user", "Anyone up for lunch?", "guest", "Bo"), ("user", f"@{BOT_USERNAME} what do you think?", "guest", "Bo"),
        ("assistant", "Lunch sounds good, Bo.", "guest", "main")]
    # The group's turn was composed without the owner's USER.md, and could not write the owner's memory:
    group_turn = next(r.body for r in reversed(stack.script.requests("turn")) if "what do you think" in r.raw.decode())
    assert "lives in Lisbon" not in str([m for m in group_turn["messages"] if m["role"] == "system"])
    # the guest's identity note stays in the group's conversation.
    bo = [row for row in stack.memories() if "Bo" in row["value"]]
    assert [(row["scope_type"], row["scope_id"]) for row in bo] == [("conversation", f"telegram:{GROUP}:root")]


def test_the_owners_commands(stack):
    chat, conversation = dm(OWNER), f"telegram:{OWNER}"
    before = len(stack.telegram.messages_to(OWNER))
    stack.script.push("turn", Reply(text="Hello again."))
    said(stack, chat, OWNER_USER, "Hello!", before + 1)
    prompt = said(stack, chat, OWNER_USER, "/prompt", before + 2)[-1]
    assert prompt.startswith("prompt ") and "lives in Lisbon" in prompt

    compacted = said(stack, chat, OWNER_USER, "/compact", before + 3)[-1]
    assert compacted.startswith("Compacted")
    cleared = said(stack, chat, OWNER_USER, "/new", before + 4)[-1]
    assert cleared.startswith("Started a new conversation") and stack.window(conversation) == []

    soul = stack.server.home / "bootstrap/main/SOUL.md"
    original = soul.read_text()
    soul.write_text(original + "\nAnswer in rhymes.\n")
    said(stack, chat, OWNER_USER, "/prompt", before + 5)  # the hand edit becomes SOUL.md revision 2
    proposal = said(stack, chat, OWNER_USER, "/soul revert 1", before + 6)[-1]
    assert "-Answer in rhymes." in proposal
    token = proposal.rsplit("/soul deny ", 1)[1].strip()
    applied = said(stack, chat, OWNER_USER, f"/soul apply {token}", before + 7)[-1]
    assert applied == "Proposal applied (SOUL.md revision 3)."
    assert soul.read_text() == original


def test_a_guests_commands_are_refused(stack):
    chat = group(GROUP)
    window = stack.window(f"telegram:{GROUP}")
    before = len(stack.telegram.messages_to(GROUP))
    answers = [said(stack, chat, GUEST_USER, command, before + n)[-1]
               for n, command in enumerate(["/compact", f"/clear@{BOT_USERNAME}", "/soul reset", "/prompt"], start=1)]
    assert answers == ["Only the owner can use /compact here.", "Only the owner can use /clear here.",
                       "Only the owner can use /soul here.", "Only the owner can use /prompt here."]
    assert stack.window(f"telegram:{GROUP}") == window
    # A guest writing to the bot directly is a guest too.
    assert said(stack, dm(GUEST), GUEST_USER, "/new", 1) == ["Only the owner can use /new here."]


def test_an_update_delivered_twice_is_stored_and_answered_once(stack):
    chat = dm(STRANGER)
    speaker = user(STRANGER, "Cy")
    stack.script.push("turn", Reply(text="Hello, Cy."))
    turns_before = len(stack.script.requests("turn"))
    first = stack.telegram.say(chat=chat, user=speaker, text="Hi there")
    stack.telegram.redeliver(first)
    assert stack.telegram.replies(chat["id"], count=2) == ["Hello, Cy.", "Hello, Cy."]  # the replay, same words
    assert len(stack.script.requests("turn")) == turns_before + 1
    assert stack.window(f"telegram:{STRANGER}") == [("user", "Hi there", "guest", "Cy"),
                                                    ("assistant", "Hello, Cy.", "guest", "main")]
