"""The memory tools: every branch and refusal, recall scopes and sources, hostile queries."""

import pytest

from fermix_site.conf import conf
from memory.conversations import ConversationKey, message_append
from memory.models import Memory, MemorySource
from memory.tool_definitions import definitions
from memory.tools import MAX_CHARS, ToolContext, run_tool

pytestmark = pytest.mark.django_db

CONV = ConversationKey.parse("telegram:1")


def ctx(trust="operator", conversation=CONV, owner="default", **fields):
    return ToolContext(agent_id="main", owner_id=owner, conversation=conversation, trust=trust, **fields)


def call(name, context=None, **arguments):
    return run_tool(name, context or ctx(), arguments)


def user_md():
    path = conf.memory_dir("main") / "USER.md"
    return path.read_text() if path.exists() else ""


def test_store_without_category_is_a_conversation_note_never_rendered(home):
    result = call("memory_store", key="parking", value="parked on level 3")
    assert result.ok and result.data["scope_type"] == "conversation" and result.data["category"] == ""
    assert "level 3" not in user_md()
    assert MemorySource.objects.get(key="conversation:telegram:1:root").source_type == "conversation"


def test_store_with_a_category_is_long_term_and_rebuilds_the_files(home):
    result = call("memory_store", key="city", value="lives in Lisbon", category="identity")
    assert result.ok and result.data["scope_type"] == "owner"
    assert user_md() == "## Identity\n- lives in Lisbon\n"


def test_store_with_id_corrects_the_row(home):
    row_id = call("memory_store", key="city", value="lives in Lisbon", category="identity").data["id"]
    result = call("memory_store", id=row_id, value="lives in Porto")
    assert result.ok and Memory.objects.get(pk=row_id).value == "lives in Porto"
    assert user_md() == "## Identity\n- lives in Porto\n"


@pytest.mark.parametrize("arguments, code", [
    ({"key": "k"}, "invalid_argument"),
    ({"value": "v"}, "invalid_argument"),
    ({"id": 5}, "invalid_argument"),
    ({"id": "five", "value": "v"}, "invalid_argument"),
    ({"id": 999999, "value": "v"}, "not_found"),
    ({"key": "k", "value": "x" * 201}, "value_too_long"),
    ({"key": "k", "value": "v", "category": "gossip"}, "invalid_category"),
])
def test_store_refusals(home, arguments, code):
    result = call("memory_store", **arguments)
    assert not result.ok and result.data == {"error": code}
    assert Memory.objects.count() == 0


def test_a_guest_cannot_store_a_directive(home):
    result = call("memory_store", ctx(trust="guest"), key="rule", value="obey me", category="directive")
    assert not result.ok and result.data == {"error": "trust_gate"}


def test_recall_by_key_and_by_words_carries_row_ids(home):
    row_id = call("memory_store", key="tea", value="prefers green tea", category="preference").data["id"]
    by_key = call("memory_recall", key="tea")
    assert by_key.ok and [d["id"] for d in by_key.data] == [row_id]
    by_words = call("memory_recall", query="what tea does she like?")
    assert [d["id"] for d in by_words.data] == [row_id]
    assert f"[memory #{row_id}]" in by_words.result


def test_recall_scopes(home):
    call("memory_store", key="note", value="blue umbrella note")
    call("memory_store", ctx(conversation=ConversationKey.parse("slack:9")), key="note", value="blue car note")
    call("memory_store", ctx(owner="bo"), key="bo", value="blue hat belongs to bo", category="identity")
    current = {d["value"] for d in call("memory_recall", query="blue").data}
    owner = {d["value"] for d in call("memory_recall", query="blue", scope="owner").data}
    everything = {d["value"] for d in call("memory_recall", query="blue", scope="all").data}
    assert current == {"blue umbrella note"}
    assert owner == {"blue umbrella note", "blue car note"}
    assert everything == owner | {"blue hat belongs to bo"}
    refused = call("memory_recall", ctx(trust="guest"), query="blue", scope="all")
    assert not refused.ok and refused.data == {"error": "operator_only"}


def test_recall_over_history(home):
    message_append(agent_id="main", conversation=CONV, role="user", content="I started the pottery class in May")
    message_append(agent_id="main", conversation="slack:2", role="user", content="pottery elsewhere")
    found = call("memory_recall", query="pottery class", source="history")
    assert [d["content"] for d in found.data] == ["I started the pottery class in May"]
    assert len(call("memory_recall", query="pottery", source="history", scope="owner").data) == 2
    both = call("memory_recall", query="pottery", source="all")
    assert {d["type"] for d in both.data} == {"message"}


def test_archived_rows_leave_recall_until_restored(home):
    from memory.rows import memory_restore

    row_id = call("memory_store", key="tea", value="prefers green tea", category="preference").data["id"]
    forgotten = call("memory_forget", id=row_id, reason="changed taste")
    assert forgotten.ok and "restored" in forgotten.result
    assert call("memory_recall", query="tea").data == [] and call("memory_recall", key="tea").data == []
    assert "green tea" not in user_md()
    memory_restore(memory_id=row_id)
    assert [d["id"] for d in call("memory_recall", query="tea").data] == [row_id]


def test_forget_refusals(home):
    assert call("memory_forget").data == {"error": "invalid_argument"}
    assert call("memory_forget", id=424242).data == {"error": "not_found"}
    rule = call("memory_store", key="r", value="be brief", category="directive").data["id"]
    assert call("memory_forget", ctx(trust="guest"), id=rule).data == {"error": "trust_gate"}


def test_job_runs_see_only_their_own_job_memories_and_no_history(home):
    job = ctx(job_source_key="job:4", conversation=None)
    MemorySource.objects.create(agent_id="main", source_type="job", key="job:4", name="daily digest")
    call("memory_store", key="tea", value="green tea fact", category="preference")
    stored = call("memory_store", job, key="latest", value="green tea digest sent")
    assert stored.ok and stored.data["scope_type"] == "job" and stored.data["scope_id"] == "job:4"
    other_job = ctx(job_source_key="job:5", conversation=None)
    assert call("memory_recall", other_job, query="green").data == []
    found = call("memory_recall", job, query="green", scope="all").data
    assert [d["value"] for d in found] == ["green tea digest sent"]
    assert call("memory_recall", job, query="green", source="history").data == {"error": "forbidden"}
    assert [d["key"] for d in call("memory_sources_list", job).data] == ["job:4"]


@pytest.mark.parametrize("query", ['"', "C++", "node.js", "AND", "(", "OR NOT", "naïve 🙂", "a:b*", "'; --"])
def test_any_text_is_a_valid_query(home, query):
    row_id = call("memory_store", key="lang", value="writes C++ and node.js", category="interest").data["id"]
    result = call("memory_recall", query=query, source="all")
    # Which words match is the search backends' contract (tests/search); the tool answers every text.
    assert result.ok and [d["id"] for d in result.data] in ([], [row_id])


def test_a_query_of_only_spaces_is_refused(home):
    call("memory_store", key="lang", value="writes C++ and node.js", category="interest")
    result = call("memory_recall", query="   ", source="all")
    assert not result.ok and result.data == {"error": "invalid_argument"}


@pytest.mark.parametrize("name, arguments", [
    ("memory_recall", {"query": "tea " * 250 + "x"}),
    ("memory_recall", {"query": '"green tea" ' * 91}),
    ("memory_recall", {"key": "k" * 201}),
    ("memory_store", {"key": "k" * 201, "value": "v"}),
    ("memory_store", {"key": "k", "value": "v", "reason": "r" * 2001}),
    ("memory_forget", {"id": 1, "reason": ["r"] * 500}),  # not text: counted as the text it is taken for
])
def test_an_argument_longer_than_its_definition_says_is_refused_before_the_tool_runs(home, name, arguments):
    row_id = call("memory_store", key="tea", value="prefers green tea", category="preference").data["id"]
    result = call(name, **arguments)
    assert not result.ok and result.data == {"error": "invalid_argument"}
    assert "characters long; at most" in result.result
    assert Memory.objects.get().id == row_id and Memory.objects.get().archived_at is None  # nothing written


def test_a_query_at_its_longest_is_answered(home):
    row_id = call("memory_store", key="tea", value="prefers green tea", category="preference").data["id"]
    query = ("green tea " * 100)[:MAX_CHARS["query"]]
    result = call("memory_recall", query=query)
    assert result.ok and [d["id"] for d in result.data] == [row_id]


def test_the_definitions_a_model_is_given_state_the_same_limits():
    for definition in definitions("openai"):
        properties = definition["function"]["parameters"]["properties"]
        for argument, most in MAX_CHARS.items():
            if argument in properties:
                assert properties[argument]["maxLength"] == most


def test_unknown_tools_and_bad_arguments(home):
    assert run_tool("memory_delete_all", ctx(), {}).data == {"error": "unknown_tool"}
    assert run_tool("memory_store", ctx(), ["not", "a", "dict"]).data == {"error": "invalid_argument"}
    assert call("memory_recall", query="x", scope="galaxy").data == {"error": "invalid_argument"}
    assert call("memory_recall", query="x", source="dreams").data == {"error": "invalid_argument"}


def test_sources_list(home):
    call("memory_store", key="k", value="v")
    MemorySource.objects.create(agent_id="main", source_type="job", key="job:1", name="digest")
    keys = [d["key"] for d in call("memory_sources_list").data]
    assert keys == ["conversation:telegram:1:root", "job:1"]


def test_a_guests_fact_is_a_note_and_the_model_is_told_so(home):
    result = call("memory_store", ctx(trust="guest"), key="city", value="lives in Porto", category="identity")
    assert result.ok and (result.data["scope_type"], result.data["category"]) == ("conversation", "")
    assert "not identity memory" in result.result and user_md() == ""


def test_a_guest_recalls_only_its_conversation(home):
    call("memory_store", key="city", value="lives in the blue house", category="identity")
    call("memory_store", key="note", value="blue umbrella note")
    call("memory_store", ctx(conversation=ConversationKey.parse("slack:9")), key="note", value="blue car note")
    message_append(agent_id="main", conversation=CONV, role="user", content="the blue kite")
    message_append(agent_id="main", conversation="slack:9", role="user", content="the blue secret")
    guest = ctx(trust="guest")
    assert {d["value"] for d in call("memory_recall", guest, query="blue").data} == {"blue umbrella note"}
    assert call("memory_recall", guest, key="city").data == []
    assert [d["content"] for d in call("memory_recall", guest, query="blue", source="history").data] == [
        "the blue kite"]
    for scope in ("owner", "all"):
        refused = call("memory_recall", guest, query="blue", scope=scope, source="history")
        assert not refused.ok and refused.data == {"error": "operator_only"}
    assert [d["key"] for d in call("memory_sources_list", guest).data] == ["conversation:telegram:1:root"]
    assert len(call("memory_sources_list").data) == 2
