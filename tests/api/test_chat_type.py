"""The owner's profile stays out of group chats: `chat_type` on messages, commits, turns and the prompt."""

import pytest

from fermix_site.conf import conf
from memory.conversations import ConversationError, chat_type_of, message_append
from memory.conversations import ConversationKey as Key
from memory.prompt_files import prompt_files_rebuild
from tests.fakeprovider import Reply, provider_config_toml, use_config
from tests.memory_factories import fact
from tests.personas import error_of

pytestmark = pytest.mark.django_db
CONV = "/agents/main/conversations/telegram:42"
PROFILE = "works as a marine biologist"
RULE = "answer in short paragraphs"


@pytest.fixture
def remembered(home):
    fact("job", PROFILE, "identity")
    fact("style", RULE, "directive")
    prompt_files_rebuild(agent_id="main")


def memory_context(body) -> str:
    return next(m["content"] for m in body["system_messages"] if m["content"].startswith("<memory-context>"))


def prompt(caller, **query):
    return caller.get("/agents/main/prompt", **query).json()


def test_the_owner_in_a_direct_chat_sees_the_profile(remembered, owner_bot):
    body = prompt(owner_bot, trust="operator")
    assert PROFILE in memory_context(body) and RULE in memory_context(body)
    assert body["parts"][-1] == "memory-context"


@pytest.mark.parametrize(("query", "reason"), [
    ({"trust": "operator", "chat_type": "group"}, "group chat"),
    ({"trust": "operator", "chat_type": "channel"}, "channel"),
    ({"trust": "guest"}, "guest speaker"),
    ({}, "guest speaker"),  # saying nothing is speaking as a guest
])
def test_outside_a_direct_chat_or_for_a_guest_the_profile_is_left_out_and_the_rules_stay(remembered, owner_bot,
                                                                                         query, reason):
    body = prompt(owner_bot, **query)
    block = memory_context(body)
    assert PROFILE not in block and "USER.md" not in block
    assert RULE in block and "### MEMORY.md" in block
    assert body["parts"][-1] == f"USER.md left out: {reason}" and "USER.md" not in body["usage"]


def test_a_conversation_remembers_the_chat_type_it_was_given(remembered, owner_bot):
    assert owner_bot.say("hello all", chat_type="group", trust="operator").status_code == 201
    assert chat_type_of(agent_id="main", key=Key.parse("telegram:42")) == "group"
    body = prompt(owner_bot, conversation="telegram:42", trust="operator")
    assert PROFILE not in memory_context(body) and body["parts"][-1] == "USER.md left out: group chat"
    assert prompt(owner_bot, conversation="telegram:42", trust="operator", chat_type="direct")["parts"][-1] == (
        "memory-context")  # the request's own chat_type comes first
    assert owner_bot.say("just us now", trust="operator").status_code == 201  # saying nothing changes nothing
    assert chat_type_of(agent_id="main", key=Key.parse("telegram:42")) == "group"
    committed = owner_bot.post(CONV + "/commit", {"peak_prompt_tokens": None, "chat_type": "direct",
                                                  "trust": "operator"})
    assert committed.status_code == 200
    assert chat_type_of(agent_id="main", key=Key.parse("telegram:42")) == "direct"


def test_user_md_in_groups_lets_the_profile_in_for_every_agent_or_for_some(remembered, owner_bot):
    with use_config("[fermix_core.memory]\nuser_md_in_groups = true\n"):
        assert PROFILE in memory_context(prompt(owner_bot, chat_type="group"))
    with use_config("[fermix_core.memory]\nuser_md_in_groups = { main = true, family = false }\n"):
        assert conf.memory.user_md_shown_to_others("main") and not conf.memory.user_md_shown_to_others("family")
        assert PROFILE in memory_context(prompt(owner_bot, chat_type="group"))
    with use_config("[fermix_core.memory]\nuser_md_in_groups = { family = true }\n"):
        assert PROFILE not in memory_context(prompt(owner_bot, chat_type="group"))


def test_a_group_turn_sends_the_model_no_profile(remembered, fake_provider, owner_bot):
    fake_provider.responder = lambda request: Reply(text="Hi everyone!")
    with use_config(provider_config_toml(fake_provider)):
        assert owner_bot.turn("hi all", chat_type="group", trust="operator").status_code == 200
        assert owner_bot.turn("and now just me", chat_type="direct", trust="operator").status_code == 200
    group, direct = (r.body for r in fake_provider.requests if r.path.endswith("/chat/completions"))
    system = ["\n".join(m["content"] for m in body["messages"] if m["role"] == "system") for body in (group, direct)]
    assert PROFILE not in system[0] and RULE in system[0]
    assert PROFILE in system[1] and RULE in system[1]


def test_an_unknown_chat_type_is_refused_and_stores_nothing(home, owner_bot):
    assert error_of(owner_bot.say("hello", chat_type="party"))[0] == 422
    assert error_of(owner_bot.get("/agents/main/prompt", chat_type="party"))[0] == 422
    assert owner_bot.get(CONV + "/messages").json()["messages"] == []
    with pytest.raises(ConversationError) as refused:
        message_append(agent_id="main", conversation="telegram:42", role="user", content="hi", chat_type="party")
    assert refused.value.code == "invalid_chat_type"
