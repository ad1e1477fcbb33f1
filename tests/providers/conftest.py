import pytest

from tests.fakeprovider import provider_config_toml, use_config


@pytest.fixture
def openai_chain(model):
    """One OpenAI-compatible provider, the fake, in force."""
    return model


@pytest.fixture
def anthropic_chain(home, fake_provider, monkeypatch):
    """One Anthropic provider, the fake, in force, with its key in the environment."""
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-ant-test")
    with use_config(provider_config_toml(fake_provider, kind="anthropic", model="claude-test",
                                         api_key_env="FAKE_ANTHROPIC_KEY")):
        yield fake_provider
