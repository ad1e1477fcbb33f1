"""doctor and the provider chain: configured, answering, the last model call, recent failed reviews."""

import datetime
import json

import pytest
from django.utils import timezone

from console.doctor import check_last_model_call, check_providers, check_reviews, doctor_report
from memory.models import ReviewRun
from providers.chain import chat
from providers.errors import ProviderError
from tests.conftest import run_manage, write_config
from tests.fakeprovider import error, provider_config_toml, unused_port, use_config

pytestmark = pytest.mark.django_db


def ask():
    return chat(messages=[{"role": "user", "content": "Hi"}], agent_tag="memory_reviewer", agent_id="main")


def test_no_provider_is_a_warning_that_says_so(home):
    check = check_providers()
    assert check.status == "warning"
    assert check.message.startswith("no model provider is configured")
    assert f"[fermix_core.providers.<name>] table to {home.home / 'config.toml'}" in check.message
    assert doctor_report()["status"] != "ok"


def test_a_working_provider_is_ok_and_asked_only_for_its_model_list(home, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        check = check_providers()
    assert check.status == "ok", check
    assert check.message == f"primary at {fake_provider.base_url()}/models answers"
    assert [(r.method, r.path) for r in fake_provider.requests] == [("GET", "/v1/models")]


def test_a_provider_refusing_connections_is_an_error_naming_it_and_its_url(home, fake_provider):
    closed = f"http://127.0.0.1:{unused_port()}/v1"
    with use_config(provider_config_toml(fake_provider, base_url=closed)):
        check = check_providers()
        report = doctor_report()
    assert check.status == "error"
    assert check.message.startswith(f"no provider answers: primary at {closed}/models: ConnectError")
    assert report["status"] == "error"


def test_a_down_primary_with_a_working_fallback_is_a_warning(home, fake_provider):
    closed = f"http://127.0.0.1:{unused_port()}/v1"
    fallback = {"kind": "openai", "model": "fallback-model", "base_url": fake_provider.base_url()}
    with use_config(provider_config_toml(fake_provider, base_url=closed, fallbacks=[fallback])):
        check = check_providers()
    assert check.status == "warning"
    assert check.message.startswith(f"1 of 2 provider(s) do not answer: primary at {closed}/models: ConnectError")
    assert check.message.endswith(f"; fallback1 at {fake_provider.base_url()}/models answers")


def test_a_refused_key_is_an_error(home, fake_provider, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", "sk-wrong")
    fake_provider.models_answer = (401, {"error": {"message": "invalid api key", "type": "authentication_error"}})
    with use_config(provider_config_toml(fake_provider, api_key_env="FAKE_KEY")):
        check = check_providers()
    assert check.status == "error" and "refused the key (HTTP 401: authentication_error: invalid api key)" \
        in check.message
    assert fake_provider.requests[0].headers["authorization"] == "Bearer sk-wrong"


def test_an_unset_key_variable_is_an_error_naming_it(home, fake_provider, monkeypatch):
    monkeypatch.delenv("FAKE_KEY", raising=False)
    with use_config(provider_config_toml(fake_provider, api_key_env="FAKE_KEY")):
        check = check_providers()
    assert check.status == "error" and "environment variable FAKE_KEY (api_key_env) is not set" in check.message
    assert fake_provider.requests == []


def test_the_last_model_call_shows_how_it_ended(home, fake_provider):
    assert check_last_model_call().message == "no model call yet"
    with use_config(provider_config_toml(fake_provider)):
        ask()
        assert check_last_model_call().status == "ok"
        assert "answered by primary/primary-model" in check_last_model_call().message
        fake_provider.push(error(400, "model not found", "invalid_request_error"))
        with pytest.raises(ProviderError):
            ask()
    check = check_last_model_call()
    assert check.status == "warning"
    assert check.message.endswith(f"failed: provider primary ({fake_provider.base_url()}/chat/completions): "
                                  "HTTP 400: invalid_request_error: model not found")


def test_failed_reviews_of_the_last_day_warn_with_the_latest_reason(home):
    def run(status, reason="", hours_ago=1):
        ReviewRun.objects.create(agent_id="main", conversation_key="telegram:1:root", owner_id="default",
                                 trigger="background", status=status, reason=reason,
                                 started_at=timezone.now() - datetime.timedelta(hours=hours_ago))

    run("failed", "ProviderError: old", hours_ago=30)
    run("ok")
    assert check_reviews().status == "ok" and check_reviews().message.endswith("(1 ran)")
    run("failed", "ProviderError: provider primary (http://x/v1/chat/completions): ConnectError")
    check = check_reviews()
    assert check.status == "warning" and check.details["failed"] == 1
    assert "of telegram:1:root at" in check.message and "ConnectError" in check.message


@pytest.mark.django_db(transaction=True)  # a second process reads this test's database
def test_the_command_names_the_provider_that_refuses_connections(home):
    closed = f"http://127.0.0.1:{unused_port()}/v1"
    write_config(home.home, provider_config_toml(None, base_url=closed))
    result = run_manage("doctor", "--json")
    report = json.loads(result.stdout)
    providers = next(c for c in report["checks"] if c["name"] == "providers")
    assert result.returncode == 1 and "providers" in result.stderr
    assert providers["status"] == "error" and f"primary at {closed}/models: ConnectError" in providers["message"]


def test_an_anthropic_provider_is_asked_with_its_own_headers(home, fake_provider, monkeypatch):
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-ant-test")
    with use_config(provider_config_toml(fake_provider, kind="anthropic", model="claude-test",
                                         api_key_env="FAKE_ANTHROPIC_KEY")):
        check = check_providers()
    assert check.status == "ok" and check.message == f"primary at {fake_provider.url}/v1/models answers"
    headers = fake_provider.requests[0].headers
    assert headers["x-api-key"] == "sk-ant-test" and headers["anthropic-version"] == "2023-06-01"
