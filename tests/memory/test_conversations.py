"""The conversation store: append, the current window, clear, and retries on a locked database."""

import sqlite3
import threading
import time
from functools import partial

import pytest
from django.db import OperationalError, connection

from fermix_site.conf import conf, load
from memory.conversations import ConversationError, ConversationKey, window_clear, window_read
from memory.models import Conversation, Message
from tests import personas

pytestmark = pytest.mark.django_db


say = partial(personas.say, trust="guest")  # the trust message_append defaults to


def texts(messages):
    return [m.content for m in messages]


def test_a_short_key_means_the_root_thread():
    assert str(ConversationKey.parse("telegram:12345")) == "telegram:12345:root"
    assert str(ConversationKey.parse("slack:C1:1700.5")) == "slack:C1:1700.5"


@pytest.mark.parametrize("key", ["telegram", "a:b:c:d", "tele gram:1", "t:../x", "t:1:a/b", ":1", "t::x", "t:1\n"])
def test_a_malformed_key_is_refused(key):
    with pytest.raises(ConversationError) as excinfo:
        say("hi", conversation=key)
    assert excinfo.value.code == "invalid_conversation"
    assert Message.objects.count() == 0


def test_append_stores_every_column():
    message = say("I moved to Lisbon", sender="ana", trust="operator", owner_id="ana", metadata={"x": 1})
    stored = Message.objects.get(pk=message.pk)
    assert (stored.channel, stored.chat_id, stored.thread_scope) == ("telegram", "42", "root")
    assert (stored.agent_id, stored.owner_id, stored.sender, stored.role) == ("main", "ana", "ana", "user")
    assert (stored.kind, stored.trust, stored.metadata) == ("chat", "operator", {"x": 1})
    assert Conversation.objects.get(key="telegram:42:root").owner_id == "ana"


@pytest.mark.parametrize("fields, code", [
    ({"role": "wizard"}, "invalid_role"),
    ({"kind": "gif"}, "invalid_kind"),
    ({"trust": "admin"}, "invalid_trust"),
    ({"owner_id": "../root"}, "invalid_owner"),
])
def test_invalid_fields_are_refused_and_nothing_is_written(fields, code):
    with pytest.raises(ConversationError) as excinfo:
        say("hello", **fields)
    assert excinfo.value.code == code
    assert Message.objects.count() == 0


def test_content_with_nul_or_lone_surrogates_or_too_large_is_refused():
    for content, code in (("a\x00b", "invalid_content"), ("\ud800", "invalid_content"),
                          ("x" * (512 * 1024 + 1), "content_too_large")):
        with pytest.raises(ConversationError) as excinfo:
            say(content)
        assert excinfo.value.code == code
    assert Message.objects.count() == 0


def test_the_window_is_the_newest_messages_oldest_first():
    for i in range(10):
        say(f"m{i}")
    say("elsewhere", conversation="telegram:43")
    assert texts(window_read(agent_id="main", conversation="telegram:42")) == [f"m{i}" for i in range(10)]
    assert texts(window_read(agent_id="main", conversation="telegram:42", limit=3)) == ["m7", "m8", "m9"]
    assert window_read(agent_id="other", conversation="telegram:42") == []


def test_the_window_honours_max_conversation_history(home, monkeypatch):
    for i in range(6):
        say(f"m{i}")
    monkeypatch.setenv("FERMIX_MEMORY_MAX_CONVERSATION_HISTORY", "4")
    with conf.use(load()):
        assert texts(window_read(agent_id="main", conversation="telegram:42")) == ["m2", "m3", "m4", "m5"]
        assert texts(window_read(agent_id="main", conversation="telegram:42", limit=2)) == ["m4", "m5"]
        assert Message.objects.count() == 6  # the bound is on the window, never on what is stored


def test_clear_empties_the_window_and_keeps_the_messages():
    for i in range(3):
        say(f"m{i}")
    assert window_clear(agent_id="main", conversation="telegram:42") == 3
    assert window_read(agent_id="main", conversation="telegram:42") == []
    say("fresh start")
    assert texts(window_read(agent_id="main", conversation="telegram:42")) == ["fresh start"]
    assert Message.objects.count() == 4


def test_the_cached_window_sees_every_append_and_clear():
    say("one")
    assert texts(window_read(agent_id="main", conversation="telegram:42")) == ["one"]
    say("two")
    assert texts(window_read(agent_id="main", conversation="telegram:42")) == ["one", "two"]
    window_clear(agent_id="main", conversation="telegram:42")
    assert texts(window_read(agent_id="main", conversation="telegram:42")) == []


def _hold_write_lock(path, seconds, ready):
    other = sqlite3.connect(path, timeout=1, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    ready.set()
    time.sleep(seconds)
    other.execute("ROLLBACK")
    other.close()


@pytest.fixture
def short_busy_timeout():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite locking")
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 100")
    yield
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 20000")


@pytest.mark.django_db(transaction=True)
def test_a_locked_database_is_retried_and_nothing_is_lost(short_busy_timeout, caplog):
    ready = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(connection.settings_dict["NAME"], 0.25, ready))
    holder.start()
    ready.wait()
    message = say("survives the lock")
    holder.join()
    assert Message.objects.get(pk=message.pk).content == "survives the lock"
    assert "database locked during message append" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_a_lock_held_past_every_attempt_raises_and_writes_nothing(short_busy_timeout, caplog):
    ready = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(connection.settings_dict["NAME"], 1.5, ready))
    holder.start()
    ready.wait()
    with pytest.raises(OperationalError):
        say("cannot be written")
    holder.join()
    assert "failed after 3 attempt(s)" in caplog.text
    assert Message.objects.count() == 0
