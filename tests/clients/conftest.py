"""The client's tests run the working copy of `clients/python/src` against the real server (`tests.live`)."""

import sys
from pathlib import Path

import pytest

from tests.api.model_script import Script
from tests.fakeprovider import provider_config_toml

CLIENT_SRC = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
if str(CLIENT_SRC) not in sys.path:
    sys.path.insert(0, str(CLIENT_SRC))  # the source under test, not whatever copy a venv holds


@pytest.fixture
def script(fake_provider):
    """The fake provider answering each kind of model call (turn, reviewer, compactor) from its own queue."""
    fake_provider.responder = script = Script()
    return script


@pytest.fixture
def served(fermix_server, fake_provider, script):
    """A started server whose model is the fake provider, with an `operator` and a `bot` (channel) key."""
    server = fermix_server(config=provider_config_toml(fake_provider))
    server.operator = server.key("ops", "operator")
    server.bot = server.key("bot", "channel", "--may-assert-operator")
    server.guest_bot = server.key("group-bot", "channel")
    return server
