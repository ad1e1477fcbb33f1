"""The API's callers are the shared personas (tests.personas); here, the scripted model behind them."""

import pytest

from resources.bootstrap import bootstrap_seed
from tests.api.model_script import Script
from tests.fakeprovider import provider_config_toml, use_config


@pytest.fixture
def script(home, fake_provider):
    """A scripted model (tests.api.model_script) behind the provider chain, SOUL.md and the rest seeded."""
    bootstrap_seed(agent_id="main")
    script = Script()
    fake_provider.responder = script
    with use_config(provider_config_toml(fake_provider, context_window=8192)):
        yield script
