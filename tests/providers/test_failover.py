"""The chain: transient failures move on to the next provider, a client error stops it."""

import pytest

from providers.chain import chat
from providers.errors import ProviderError
from providers.models import ModelCall
from tests.fakeprovider import FakeProvider, Reply, error, garbage, provider_config_toml, unused_port, use_config

pytestmark = pytest.mark.django_db

FALLBACK = {"kind": "openai", "model": "fallback-model"}


def ask(**options):
    return chat(messages=[{"role": "user", "content": "Hi"}], agent_tag="memory_reviewer", agent_id="main",
                **options)


def attempts():
    return list(ModelCall.objects.order_by("attempt").values_list("provider", "outcome"))


@pytest.fixture
def with_fallback(home, fake_provider):
    """Primary and fallback on the same fake, told apart by model name."""
    fake_provider.push(Reply(text="from the fallback"), model="fallback-model")
    with use_config(provider_config_toml(fake_provider, fallbacks=[FALLBACK])):
        yield fake_provider


@pytest.mark.parametrize("failure", [
    error(500, "internal error"),
    error(502, "bad gateway"),
    error(503, "overloaded"),
    error(429, "rate limit reached", "rate_limit_error"),
    error(408, "request timeout"),
    garbage(),
    garbage(b'{"choices": "nope"}'),
    garbage(b'{"error": {"message": "upstream failed", "code": 502}}'),
    garbage(b"[1, 2]"),
    Reply(hang_up=True),
], ids=["500", "502", "503", "429", "408", "html", "no-choices", "error-in-200", "not-an-object", "hang-up"])
def test_it_falls_back_on_a_transient_failure(with_fallback, failure):
    with_fallback.push(failure, model="primary-model")

    result = ask()

    assert (result.text, result.provider, result.model) == ("from the fallback", "fallback1", "fallback-model")
    assert [r.model for r in with_fallback.requests] == ["primary-model", "fallback-model"]
    assert attempts() == [("primary", "fallback"), ("fallback1", "ok")]


def test_it_falls_back_when_the_primary_times_out(with_fallback):
    with_fallback.push(Reply(delay=30), model="primary-model")

    result = ask(timeout_ms=1000)

    assert result.provider == "fallback1"
    assert "timed out" in ModelCall.objects.get(provider="primary").error


def test_it_falls_back_when_the_primary_refuses_connections(home, fake_provider):
    closed = f"http://127.0.0.1:{unused_port()}/v1"
    with use_config(provider_config_toml(fake_provider, base_url=closed, fallbacks=[FALLBACK])):
        result = ask()

    assert result.provider == "fallback1"
    assert [r.model for r in fake_provider.requests] == ["fallback-model"]
    primary = ModelCall.objects.get(provider="primary")
    assert (primary.outcome, primary.http_status) == ("fallback", None)
    assert "ConnectError" in primary.error


def test_it_falls_back_across_kinds(home, fake_provider):
    with FakeProvider() as other:
        fake_provider.push(error(529, "Overloaded", "overloaded_error"))
        other.push(Reply(text="from openai"))
        config = provider_config_toml(fake_provider, kind="anthropic", model="claude-test",
                                      fallbacks=[{"kind": "openai", "model": "gpt-test", "server": other}])
        with use_config(config):
            result = ask()

    assert (result.text, result.provider) == ("from openai", "fallback1")
    assert fake_provider.requests[0].path == "/v1/messages"
    assert other.requests[0].path == "/v1/chat/completions"


def test_a_missing_key_variable_skips_to_the_next_provider(home, fake_provider, monkeypatch):
    monkeypatch.delenv("FAKE_UNSET_KEY", raising=False)
    with use_config(provider_config_toml(fake_provider, api_key_env="FAKE_UNSET_KEY", fallbacks=[FALLBACK])):
        result = ask()

    assert result.provider == "fallback1"
    assert [r.model for r in fake_provider.requests] == ["fallback-model"]
    assert "FAKE_UNSET_KEY" in ModelCall.objects.get(provider="primary").error


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_it_does_not_fall_back_on_a_client_error(with_fallback, status):
    with_fallback.push(error(status, "you did something wrong"), model="primary-model")

    with pytest.raises(ProviderError) as excinfo:
        ask()

    assert (excinfo.value.status, excinfo.value.transient, excinfo.value.provider) == (status, False, "primary")
    assert "you did something wrong" in str(excinfo.value)
    assert with_fallback.requests_for("fallback-model") == []
    assert attempts() == [("primary", "failed")]


def test_it_raises_every_failure_when_all_providers_fail(with_fallback):
    with_fallback._queues.clear()
    with_fallback.push(error(500, "primary down"), model="primary-model")
    with_fallback.push(error(503, "fallback down"), model="fallback-model")

    with pytest.raises(ProviderError) as excinfo:
        ask()

    assert excinfo.value.transient
    assert [f.provider for f in excinfo.value.failures] == ["primary", "fallback1"]
    assert "primary down" in str(excinfo.value) and "fallback down" in str(excinfo.value)
    assert attempts() == [("primary", "fallback"), ("fallback1", "failed")]


def test_a_lone_provider_failure_is_raised_as_it_is(home, fake_provider):
    fake_provider.push(error(503, "overloaded"))
    with use_config(provider_config_toml(fake_provider)):
        with pytest.raises(ProviderError) as excinfo:
            ask()

    assert (excinfo.value.status, excinfo.value.transient) == (503, True)
    assert attempts() == [("primary", "failed")]


def test_a_model_without_reasoning_effort_is_asked_again_without_it(with_fallback):
    with_fallback.push(error(400, "Unrecognized request argument supplied: reasoning_effort"), model="primary-model")
    with_fallback.push(Reply(text="summary"), model="primary-model")

    result = ask(reasoning_effort="medium")

    assert (result.text, result.provider) == ("summary", "primary")
    first, second = with_fallback.requests
    assert first.body["reasoning_effort"] == "medium"
    assert "reasoning_effort" not in second.body
    assert attempts() == [("primary", "fallback"), ("primary", "ok")]
    assert ModelCall.objects.get(attempt=0).error.endswith("(retrying without reasoning_effort)")
