"""The fake provider is a real server: another process reaches it through the test's config.toml."""

import pytest

from providers.models import ModelCall
from tests.conftest import run_manage
from tests.fakeprovider import Reply, provider_config_toml, use_config

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCRIPT = (
    "from providers.chain import chat; "
    "print(chat(messages=[{'role': 'user', 'content': 'Hi'}], agent_tag='job', agent_id='main').text)"
)


def test_a_second_process_calls_the_fake_and_traces_it(home, fake_provider):
    fake_provider.push(Reply(text="hello from loopback", prompt_tokens=9, completion_tokens=3))
    with use_config(provider_config_toml(fake_provider)):
        done = run_manage("shell", "-c", SCRIPT)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "hello from loopback"
    assert fake_provider.requests[0].body["messages"] == [{"role": "user", "content": "Hi"}]
    row = ModelCall.objects.get()
    assert (row.agent_tag, row.outcome, row.prompt_tokens) == ("job", "ok", 9)
