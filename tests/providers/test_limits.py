"""Context-length errors, the buffered timeout, oversized answers and a missing configuration."""

import pytest

from providers.chain import chat
from providers.errors import ContextLengthError, NoProviderConfigured, ProviderError
from providers.models import ModelCall
from providers.transport import MAX_ANSWER_BYTES
from tests.fakeprovider import Reply, error, provider_config_toml, use_config

pytestmark = pytest.mark.django_db

TOO_BIG = MAX_ANSWER_BYTES + 1024 * 1024


def ask(**options):
    return chat(messages=[{"role": "user", "content": "Hi"}], agent_tag="turn", agent_id="main", **options)


@pytest.mark.parametrize("kind, failure", [
    ("openai", error(400, "This model's maximum context length is 8192 tokens. However, your messages resulted "
                          "in 9120 tokens. Please reduce the length of the messages.", "invalid_request_error")),
    ("openai", error(400, "the request exceeds the available context size, try increasing it",
                     "exceed_context_size_error")),
    ("anthropic", error(400, "prompt is too long: 210463 tokens > 200000 maximum", "invalid_request_error")),
], ids=["openai", "llama.cpp", "anthropic"])
def test_a_prompt_too_long_raises_context_length_error_without_fallback(home, fake_provider, kind, failure):
    fake_provider.push(failure, model="primary-model")
    with use_config(provider_config_toml(fake_provider, kind=kind, fallbacks=[{"kind": kind, "model": "big"}])):
        with pytest.raises(ContextLengthError) as excinfo:
            ask()

    assert (excinfo.value.status, excinfo.value.transient, excinfo.value.provider) == (400, False, "primary")
    assert fake_provider.requests_for("big") == []
    assert ModelCall.objects.get().outcome == "failed"


def test_another_bad_request_is_not_a_context_length_error(openai_chain):
    openai_chain.push(error(400, "messages[0].role is invalid", "invalid_request_error"))

    with pytest.raises(ProviderError) as excinfo:
        ask()

    assert not isinstance(excinfo.value, ContextLengthError)
    assert "messages[0].role is invalid" in str(excinfo.value)


def test_a_slow_answer_times_out(openai_chain):
    openai_chain.push(Reply(delay=30))

    with pytest.raises(ProviderError, match="timed out") as excinfo:
        ask(timeout_ms=500)

    assert excinfo.value.transient
    assert ModelCall.objects.get().outcome == "failed"


def test_an_answer_that_trickles_in_times_out_at_the_deadline(openai_chain):
    # Each piece comes well within the timeout; only the deadline on the whole read stops it.
    openai_chain.push(Reply(size=4000, declare_size=False, trickle=0.2))

    with pytest.raises(ProviderError, match="timed out after 1 s reading the answer"):
        ask(timeout_ms=1000)


def test_the_configured_buffered_timeout_applies_by_default(home, fake_provider):
    fake_provider.push(Reply(delay=30))
    with use_config(provider_config_toml(fake_provider, llm_buffered_ms=1000)):
        with pytest.raises(ProviderError, match="timed out after 1 s"):
            ask()


@pytest.mark.parametrize("declare_size", [True, False], ids=["content-length", "chunked"])
def test_an_enormous_answer_is_refused(openai_chain, declare_size):
    openai_chain.push(Reply(size=TOO_BIG, declare_size=declare_size))

    with pytest.raises(ProviderError, match="answer too large") as excinfo:
        ask()

    assert excinfo.value.transient
    assert ModelCall.objects.get().outcome == "failed"


def test_an_enormous_answer_moves_on_to_the_fallback(home, fake_provider):
    fake_provider.push(Reply(size=TOO_BIG, declare_size=False), model="primary-model")
    with use_config(provider_config_toml(fake_provider, fallbacks=[{"kind": "openai", "model": "fallback-model"}])):
        assert ask().provider == "fallback1"


def test_an_enormous_error_body_is_cut_not_buffered(openai_chain):
    openai_chain.push(Reply(status=500, size=TOO_BIG, declare_size=False))

    with pytest.raises(ProviderError) as excinfo:
        ask()

    assert excinfo.value.status == 500
    assert len(ModelCall.objects.get().error) <= 2000


def test_no_configured_provider_raises_before_any_call(home):
    with pytest.raises(NoProviderConfigured, match="fermix_core.providers"):
        ask()

    assert ModelCall.objects.count() == 0


@pytest.mark.parametrize("options, message", [
    ({"agent_tag": ""}, "agent_tag"),
    ({"messages": []}, "non-empty"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "role"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
])
def test_a_malformed_call_is_refused_before_any_request(openai_chain, options, message):
    arguments = {"messages": [{"role": "user", "content": "Hi"}], "agent_tag": "turn", "agent_id": "main", **options}

    with pytest.raises(ValueError, match=message):
        chat(**arguments)

    assert openai_chain.requests == []
