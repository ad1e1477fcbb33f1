"""Property-based tests: any query text and any message content are handled, never raise, lose nothing."""

import uuid

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory import fts
from memory.conversations import ConversationError, ConversationKey, message_append, window_read
from memory.models import Message
from memory.rows import MemoryRowError, memory_upsert
from memory.search import search_memories, search_messages
from memory.tools import ToolContext, run_tool

pytestmark = pytest.mark.django_db

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FTS_SYNTAX = st.sampled_from(['"', "'", "(", ")", "*", ":", "^", "+", "-", "AND", "OR", "NOT", "NEAR", "NEAR(",
                              "C++", "node.js", "{", "}", "\\", "/", ";", "--", "🙂", "naïve", "\u200b", "\t"])
QUERIES = st.lists(st.one_of(st.text(max_size=20), FTS_SYNTAX), max_size=8).map(" ".join)


@SETTINGS
@given(query=QUERIES)
def test_any_query_text_is_searchable_without_error(query):
    quoted = fts.quote_query(query)
    if connection.vendor == "sqlite" and quoted:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH %s", [quoted])
    assert isinstance(search_messages(query=query, filters={"agent_id": "main"}), list)
    assert isinstance(search_memories(query=query, filters={"agent_id": "main"}), list)
    result = run_tool("memory_recall", ToolContext(agent_id="main", owner_id="default", trust="operator",
                                                   conversation=ConversationKey.parse("t:1")),
                      {"query": query, "source": "all", "scope": "all"})
    assert result.ok or result.data == {"error": "invalid_argument"}


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=300)


@SETTINGS
@given(contents=st.lists(TEXT, min_size=1, max_size=5))
def test_any_message_content_is_stored_exactly_and_found_by_its_words(contents):
    conversation = f"t:{uuid.uuid4().hex}"  # each example its own conversation
    stored = []
    for content in contents:
        try:
            stored.append(message_append(agent_id="main", conversation=conversation, role="user", content=content))
        except ConversationError as exc:
            assert exc.code == "invalid_content" and "\x00" in content
    window = window_read(agent_id="main", conversation=conversation)
    assert [m.content for m in window] == [m.content for m in stored]
    rows = Message.objects.filter(chat_id=conversation.split(":")[1]).order_by("id")
    assert [m.content for m in rows] == [m.content for m in stored]
    if connection.vendor == "sqlite":
        assert fts.integrity_check(connection) == []
    for message in stored:
        words = [w for w in message.content.split() if w.isalnum() and w.isascii()]
        if words:
            found = search_messages(query=words[0], limit=100,
                                    filters={"agent_id": "main", "chat_id": conversation.split(":")[1]})
            assert message.id in [m.id for m in found]


@SETTINGS
@given(value=st.text(max_size=260), key=st.text(max_size=30))
def test_memory_values_are_stored_or_refused_clearly(value, key):
    try:
        row, _ = memory_upsert(agent_id="main", owner_id="default", scope_type="owner", scope_id="default",
                               key=key, value=value, category="interest", actor_type="operator")
    except MemoryRowError as exc:
        assert exc.code in {"invalid_value", "value_too_long", "invalid_key"}
        return
    assert row.value == value.strip() and len(row.value) <= 200
