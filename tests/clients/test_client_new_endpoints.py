"""fermix_client on the CONTRACT §8 endpoints for bot authors: tool definitions, memories over HTTP,
and conversations with a cursor."""

import pytest
from fermix_client import Client, Forbidden

pytestmark = [pytest.mark.slow, pytest.mark.live]


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "mcp"])
def test_tool_definitions_name_the_four_memory_tools(served, fmt):
    with Client(served.base, api_key=served.bot) as fermix:
        text = str(fermix.tool_definitions(fmt))
    for name in ("memory_store", "memory_recall", "memory_forget", "memory_sources_list"):
        assert name in text


def test_memories_over_http_add_read_and_change_a_row_with_its_history(served):
    with Client(served.base, api_key=served.operator) as ops, Client(served.base, api_key=served.bot) as bot:
        added = ops.add_memory(key="drink", value="drinks green tea", category="preference")
        row = added.get("memory", added)
        changed = ops.update_memory(row["id"], value="drinks black coffee", reason="the user said so")
        assert changed.get("memory", changed)["value"] == "drinks black coffee"
        shown = ops.memory(row["id"])
        assert "drinks green tea" in str(shown["history"]) and "drinks black coffee" in str(shown)
        with pytest.raises(Forbidden):
            bot.update_memory(row["id"], value="x", reason="a channel key is no operator")
        assert "drinks black coffee" in str(bot.prompt(trust="operator")["system_messages"])


def test_conversations_are_listed_newest_first_page_by_page(served):
    with Client(served.base, api_key=served.bot) as fermix:
        for n in range(5):
            fermix.append(f"telegram:{n}", "hello")
        seen, cursor = [], None
        while True:
            page = fermix.conversations(cursor=cursor, limit=2)
            seen += [str(item.get("conversation", item.get("key"))) for item in page["conversations"]]
            cursor = page.get("next_cursor")
            if not cursor:
                break
    expected = [f"telegram:{n}:root" for n in reversed(range(5))]
    assert [key for key in seen if key in expected] == expected and len(seen) == len(set(seen))

