"""The client's tests run the working copy of `clients/python/src` against the real server (`tests.live`)."""

import sys
import zlib
from pathlib import Path

import pytest

from tests.api.model_script import Script
from tests.fakeprovider import FakeProvider, provider_config_toml
from tests.live import LiveServer

CLIENT_SRC = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
if str(CLIENT_SRC) not in sys.path:
    sys.path.insert(0, str(CLIENT_SRC))  # the source under test, not whatever copy a venv holds


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One started server per test module whose model is the fake provider (`.script` answers each kind of
    model call from its own queue), with an `operator`, a `bot` (channel, may assert operator) and a
    `guest_bot` (channel) key. Tests share it, so each speaks in its own conversation (`conv`)."""
    with FakeProvider() as provider:
        provider.responder = script = Script()
        server = LiveServer(tmp_path_factory.mktemp("client") / "home", config=provider_config_toml(provider)).start()
        server.script = script
        server.operator = server.key("ops", "operator")
        server.bot = server.key("bot", "channel", "--may-assert-operator")
        server.guest_bot = server.key("group-bot", "channel")
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def script(served):
    return served.script


@pytest.fixture
def conv(request):
    """A conversation key of this test's own."""
    return f"telegram:{zlib.crc32(request.node.name.encode())}"
