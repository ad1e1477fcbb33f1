"""The hot caches never serve stale data to another process: two real processes, one database."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memory import conversations, rows
from tests.conftest import process_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CONV = {"agent": "main", "conversation": "telegram:7"}


class Probe:
    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cache_probe.py"))], env=process_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

    def __call__(self, do, **args):
        self.proc.stdin.write(json.dumps({"do": do, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the probe process died"
        return json.loads(line)["answer"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def probe():
    p = Probe()
    yield p
    p.close()


def here_window():
    return [m.content for m in conversations.window_read(agent_id="main", conversation="telegram:7")]


def test_each_process_sees_the_others_appends_and_clears_at_once(probe):
    conversations.message_append(agent_id="main", conversation="telegram:7", role="user", content="one")
    assert here_window() == ["one"]          # now cached here
    assert probe("window", **CONV) == ["one"]  # and cached there

    probe("append", content="two", **CONV)
    assert here_window() == ["one", "two"]

    conversations.message_append(agent_id="main", conversation="telegram:7", role="user", content="three")
    assert probe("window", **CONV) == ["one", "two", "three"]

    probe("clear", **CONV)
    assert here_window() == []
    conversations.message_append(agent_id="main", conversation="telegram:7", role="user", content="four")
    assert probe("window", **CONV) == ["four"]


def test_each_process_sees_the_others_memory_changes_at_once(probe):
    row, _ = rows.memory_upsert(agent_id="main", owner_id="ana", scope_type="owner", scope_id="ana", key="tea",
                                value="likes green tea", category="preference", actor_type="operator")
    lookup = dict(agent_id="main", owner_id="ana", scope_type="owner", scope_id="ana", key="tea")
    assert rows.memory_lookup(**lookup).value == "likes green tea"
    assert probe("lookup", agent="main", owner="ana", key="tea") == "likes green tea"

    probe("archive", id=row.id)
    assert rows.memory_lookup(**lookup) is None

    assert probe("upsert", agent="main", owner="ana", key="tea", value="likes black tea") == "resave"
    assert rows.memory_lookup(**lookup).value == "likes black tea"

    rows.memory_upsert(agent_id="main", owner_id="ana", scope_type="owner", scope_id="ana", key="tea",
                       value="likes oolong", category="preference", actor_type="operator")
    assert probe("lookup", agent="main", owner="ana", key="tea") == "likes oolong"
