"""A provider error names the provider and the URL it was sent to: that is what an operator fixes."""

import pytest

from providers.chain import chat
from providers.errors import ProviderError
from providers.models import ModelCall
from tests.fakeprovider import error, provider_config_toml, unused_port, use_config

pytestmark = pytest.mark.django_db


def ask():
    return chat(messages=[{"role": "user", "content": "Hi"}], agent_tag="memory_reviewer", agent_id="main")


def test_a_refused_connection_names_the_provider_and_its_url(home, fake_provider):
    closed = f"http://127.0.0.1:{unused_port()}/v1"
    with use_config(provider_config_toml(fake_provider, base_url=closed)), \
            pytest.raises(ProviderError) as caught:
        ask()
    message = str(caught.value)
    assert message.startswith(f"provider primary ({closed}/chat/completions): ConnectError")
    assert caught.value.provider == "primary"
    assert ModelCall.objects.get().error == message


def test_an_http_error_names_the_provider_and_its_url(home, fake_provider):
    fake_provider.push(error(401, "invalid api key", "authentication_error"))
    with use_config(provider_config_toml(fake_provider)), pytest.raises(ProviderError) as caught:
        ask()
    assert str(caught.value) == (f"provider primary ({fake_provider.base_url()}/chat/completions): "
                                 "HTTP 401: authentication_error: invalid api key")


def test_when_every_provider_fails_each_is_named_once(home, fake_provider):
    closed = f"http://127.0.0.1:{unused_port()}/v1"
    config = provider_config_toml(fake_provider, base_url=closed,
                                  fallbacks=[{"kind": "openai", "model": "fallback-model", "base_url": closed}])
    with use_config(config), pytest.raises(ProviderError) as caught:
        ask()
    message = str(caught.value)
    assert message.startswith("all 2 providers failed: provider primary (")
    assert "; provider fallback1 (" in message and message.count("primary") == 1
