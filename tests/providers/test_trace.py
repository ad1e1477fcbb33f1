"""Every attempt leaves a ModelCall row; the admin shows them read-only."""

import pytest
from django.urls import reverse

from providers.chain import chat
from providers.errors import ProviderError
from providers.models import ModelCall
from tests.fakeprovider import Reply, error, provider_config_toml, use_config

pytestmark = pytest.mark.django_db


def test_a_successful_call_is_traced(openai_chain):
    openai_chain.push(Reply(text="ok", prompt_tokens=321, completion_tokens=12))

    result = chat(messages=[{"role": "user", "content": "Hi"}], agent_tag="compactor", agent_id="main",
                  conversation_key="telegram:42:root")

    row = ModelCall.objects.get()
    assert (row.agent_tag, row.agent_id, row.conversation_key) == ("compactor", "main", "telegram:42:root")
    assert (row.provider, row.kind, row.model, row.attempt) == ("primary", "openai", "primary-model", 0)
    assert (row.prompt_tokens, row.completion_tokens) == (321, 12)
    assert (row.outcome, row.http_status, row.error) == ("ok", 200, "")
    assert row.latency_ms >= 0
    assert row.call_id == result.call_id != ""


def test_each_attempt_is_traced_with_its_outcome(home, fake_provider):
    fake_provider.push(error(502, "bad gateway"), model="primary-model")
    fake_provider.push(Reply(text="ok", prompt_tokens=50, completion_tokens=5), model="fallback-model")
    local = {"name": "local", "kind": "openai", "model": "fallback-model"}
    config = provider_config_toml(fake_provider, fallbacks=[local])
    with use_config(config):
        result = chat(messages=[{"role": "user", "content": "Hi"}], agent_tag="soul_curation", agent_id="main")

    failed, answered = ModelCall.objects.order_by("attempt")
    assert (failed.attempt, failed.provider, failed.outcome, failed.http_status) == (0, "primary", "fallback", 502)
    assert "bad gateway" in failed.error
    assert (failed.prompt_tokens, failed.completion_tokens) == (0, 0)
    assert (answered.attempt, answered.provider, answered.outcome) == (1, "local", "ok")
    assert (answered.prompt_tokens, answered.completion_tokens) == (50, 5)
    assert failed.call_id == answered.call_id == result.call_id
    assert {failed.agent_tag, answered.agent_tag} == {"soul_curation"}


def test_a_long_error_is_cut(openai_chain):
    openai_chain.push(error(500, "x" * 10_000))

    with pytest.raises(ProviderError):
        chat(messages=[{"role": "user", "content": "Hi"}], agent_tag="turn", agent_id="main")

    assert 0 < len(ModelCall.objects.get().error) <= 2000


def listed(response):
    return [row.pk for row in response.context["cl"].result_list]


def test_the_admin_lists_calls_read_only(admin_client, openai_chain):
    openai_chain.push(Reply(text="ok"), error(500, "<script>alert(1)</script>"))
    chat(messages=[{"role": "user", "content": "Hi"}], agent_tag="memory_reviewer", agent_id="main")
    with pytest.raises(ProviderError):
        chat(messages=[{"role": "user", "content": "Hi"}], agent_tag="compactor", agent_id="main")
    ok, failed = ModelCall.objects.order_by("id")

    changelist = reverse("admin:providers_modelcall_changelist")
    listing = admin_client.get(changelist)
    assert listing.status_code == 200
    assert listed(listing) == [failed.pk, ok.pk]
    assert listed(admin_client.get(changelist, {"outcome__exact": "failed"})) == [failed.pk]
    assert listed(admin_client.get(changelist, {"agent_tag": "memory_reviewer"})) == [ok.pk]
    assert listed(admin_client.get(changelist, {"q": "alert"})) == [failed.pk]

    detail = admin_client.get(reverse("admin:providers_modelcall_change", args=[failed.pk]))
    assert detail.status_code == 200
    assert b"<script>alert(1)</script>" not in detail.content
    assert b"&lt;script&gt;" in detail.content
    assert b'name="_save"' not in detail.content

    assert admin_client.get(reverse("admin:providers_modelcall_add")).status_code == 403
    assert admin_client.get(reverse("admin:providers_modelcall_delete", args=[ok.pk])).status_code == 403
    change = reverse("admin:providers_modelcall_change", args=[ok.pk])
    assert admin_client.post(change, {"outcome": "failed"}).status_code == 403
