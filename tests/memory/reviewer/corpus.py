"""Answers in the shapes real models give the reviewer, each with exactly what it must yield.

Collected from how small local models (Llama 3 8B, Qwen 2.5 7B, Mistral 7B, Phi-3 mini) and hosted ones
answer a "JSON only" instruction: fences with and without a language, prose around the JSON, a bare list
or a single object, the list under a key of their own, comments, trailing commas, Python quoting, ids as
text, keys or categories left out, and a dozen ways of saying there is nothing to save.

`expect` is NOTHING (the run saves nothing), UNPARSEABLE (the run fails, the cursor stays), or one entry per
proposed item: the operation read (`op`, `category`, `key`, `value`, `id`, `message_ids`; a derived key is
`DERIVED`) or `("skip", code)`. The rows shown to the model are `SHOWN`: key → category.
"""

from dataclasses import dataclass

NOTHING, UNPARSEABLE, DERIVED = "nothing", "unparseable", "derived"
SHOWN = {"home_city": "identity", "coffee": "preference", "reply_language": "directive"}


def add(category, key, value, *message_ids):
    return {"op": "add", "category": category, "key": key, "value": value, "message_ids": list(message_ids)}


def replace(memory_id, value, *message_ids, category=None):
    return {"op": "replace", "id": memory_id, "value": value, "category": category, "message_ids": list(message_ids)}


def archive(memory_id, *message_ids):
    return {"op": "archive", "id": memory_id, "message_ids": list(message_ids)}


def skip(code):
    return ("skip", code)


@dataclass(frozen=True)
class Case:
    name: str
    answer: str
    expect: object


CORPUS = [
    # --- what we ask for, and the fences around it -----------------------------------------------------
    Case("strict object", '{"operations": [{"op": "add", "category": "identity", "key": "job", '
         '"value": "works as a marine biologist", "message_ids": [3]}]}',
         [add("identity", "job", "works as a marine biologist", 3)]),
    Case("json fence", '```json\n{"operations": [{"op": "add", "category": "interest", "key": "music", '
         '"value": "loves jazz", "message_ids": [4]}]}\n```', [add("interest", "music", "loves jazz", 4)]),
    Case("bare fence", '```\n{"operations": [{"op": "archive", "id": 7, "message_ids": [2]}]}\n```',
         [archive(7, 2)]),
    Case("JSON fence upper case, prose before (Llama 3 8B)",
         'Here are the memory operations based on the messages:\n\n```JSON\n{"operations": [{"op": "replace", '
         '"id": 12, "value": "lives in Porto", "message_ids": [5]}]}\n```', [replace(12, "lives in Porto", 5)]),
    Case("tilde fence", '~~~json\n[{"op": "add", "category": "goal", "key": "marathon", '
         '"value": "wants to run a marathon"}]\n~~~', [add("goal", "marathon", "wants to run a marathon")]),
    Case("fence with a space before the language", '``` json\n[{"op":"add","category":"preference","key":"units",'
         '"value":"prefers metric units","message_ids":[1]}]\n```',
         [add("preference", "units", "prefers metric units", 1)]),
    Case("prose before and after (Mistral 7B)",
         'Based on the conversation, I identified one durable fact.\n{"operations": [{"op": "add", "category": '
         '"identity", "key": "name", "value": "is called Ana", "message_ids": [1]}]}\nLet me know if you need '
         'anything else!', [add("identity", "name", "is called Ana", 1)]),
    Case("explanation after the fence (Qwen 2.5 7B)",
         '```json\n{"operations": [{"op": "add", "category": "context", "key": "thesis", "value": "is writing a '
         'thesis on coral reefs", "message_ids": [2]}]}\n```\n\nExplanation: message 2 states an ongoing project.',
         [add("context", "thesis", "is writing a thesis on coral reefs", 2)]),
    Case("two fences, the first an example", 'The format is:\n```\n{"op": "..."}\n```\nMy answer:\n```json\n'
         '[{"op": "add", "category": "interest", "key": "hiking", "value": "enjoys hiking", "message_ids": [6]}]\n```',
         [add("interest", "hiking", "enjoys hiking", 6)]),
    # --- other containers -------------------------------------------------------------------------------
    Case("top-level list", '[{"op": "add", "category": "preference", "key": "tea", "value": "prefers green tea"}, '
         '{"op": "archive", "id": 3}]', [add("preference", "tea", "prefers green tea"), archive(3)]),
    Case("one op object (Phi-3)", '{"op": "add", "category": "identity", "key": "pet", "value": "has a dog named '
         'Rex", "message_ids": [2]}', [add("identity", "pet", "has a dog named Rex", 2)]),
    Case("ops key", '{"ops": [{"op": "archive", "id": "9"}]}', [archive(9)]),
    Case("memories key", '{"memories": [{"action": "add", "category": "goal", "key": "japanese", '
         '"value": "is learning Japanese"}]}', [add("goal", "japanese", "is learning Japanese")]),
    Case("actions key, action field", '{"actions": [{"action": "update", "id": 12, "value": "lives in Porto"}]}',
         [replace(12, "lives in Porto")]),
    Case("nested result", '{"result": {"operations": [{"op": "add", "category": "interest", "key": "f1", '
         '"value": "follows Formula 1"}]}}', [add("interest", "f1", "follows Formula 1")]),
    Case("list under an unknown key", '{"memory_updates": [{"op": "add", "category": "identity", "key": "kids", '
         '"value": "has two children"}], "summary": "one new fact"}', [add("identity", "kids", "has two children")]),
    Case("operation and type field names", '[{"operation": "ADD", "type": "preference", "key": "mode", '
         '"value": "prefers dark mode"}]', [add("preference", "mode", "prefers dark mode")]),
    # --- JSON-like, not JSON -------------------------------------------------------------------------------
    Case("line comments", '```json\n{\n  "operations": [\n    // the user moved\n    {"op": "replace", "id": 12, '
         '"value": "lives in Porto"} // message 5\n  ]\n}\n```',
         [replace(12, "lives in Porto")]),
    Case("block comment and trailing commas", '{"operations": [/* new */ {"op": "add", "category": "interest", '
         '"key": "vinyl", "value": "collects vinyl records",},],}',
         [add("interest", "vinyl", "collects vinyl records")]),
    Case("single quotes (Python repr)", "[{'op': 'add', 'category': 'identity', 'key': 'city', "
         "'value': \"lives in O'Porto\", 'message_ids': [3]}]", [add("identity", "city", "lives in O'Porto", 3)]),
    Case("single quotes with true/null", "{'operations': [{'op': 'archive', 'id': 4, 'confirmed': true, "
         "'reason': null}]}", [archive(4)]),
    Case("hash comments", '{"operations": [\n  {"op": "add", "category": "goal", "key": "house", '
         '"value": "wants to buy a house"}  # message 8\n]}', [add("goal", "house", "wants to buy a house")]),
    # --- ids and keys as models write them ------------------------------------------------------------
    Case("numeric ids as strings", '{"operations": [{"op": "replace", "id": "12", "value": "lives in Porto", '
         '"message_ids": ["5", "#6"]}]}', [replace(12, "lives in Porto", 5, 6)]),
    Case("memory_id and a hash id", '{"operations": [{"op": "archive", "memory_id": "#7"}]}', [archive(7)]),
    Case("one message id, not a list", '{"operations": [{"op": "add", "category": "interest", "key": "guitar", '
         '"value": "plays the guitar", "message_id": 4}]}', [add("interest", "guitar", "plays the guitar", 4)]),
    Case("message ids under sources", '[{"op": "add", "category": "identity", "key": "born", "value": "was born in '
         '1990", "sources": [{"id": 2}]}]', [add("identity", "born", "was born in 1990", 2)]),
    Case("missing key", '{"operations": [{"op": "add", "category": "identity", "value": "works as a marine '
         'biologist", "message_ids": [3]}]}', [add("identity", DERIVED, "works as a marine biologist", 3)]),
    Case("empty key", '[{"op": "add", "category": "preference", "key": "", "value": "likes short answers"}]',
         [add("preference", DERIVED, "likes short answers")]),
    Case("missing category, key of a shown row", '[{"op": "add", "key": "home_city", "value": "lives in Porto"}]',
         [add("identity", "home_city", "lives in Porto")]),
    Case("category as a section name", '[{"op": "add", "section": "Working Rules", "key": "units", '
         '"value": "use metric units"}]', [add("directive", "units", "use metric units")]),
    Case("plural, capitalised category", '[{"op": "add", "category": "Preferences", "key": "seat", '
         '"value": "prefers window seats"}]', [add("preference", "seat", "prefers window seats")]),
    Case("no op, a value and a category", '[{"category": "interest", "key": "chess", "value": "plays chess"}]',
         [add("interest", "chess", "plays chess")]),
    Case("no op, an id and a value", '[{"id": 12, "value": "lives in Porto"}]', [replace(12, "lives in Porto")]),
    Case("delete means archive", '[{"op": "delete", "id": 5, "reason": "the dog died"}]', [archive(5)]),
    Case("replace with a category", '[{"op": "replace", "id": 3, "value": "prefers tea", "category": "Preference"}]',
         [replace(3, "prefers tea", category="preference")]),
    # --- what cannot be understood is skipped with its reason ---------------------------------------
    Case("missing category, no obvious target", '[{"op": "add", "key": "misc", "value": "has a sister in Berlin"}]',
         [skip("missing_category")]),
    Case("unknown category", '[{"op": "add", "category": "mood", "key": "k", "value": "is happy today"}]',
         [skip("invalid_category")]),
    Case("unknown op", '[{"op": "merge", "id": 1, "value": "x"}]', [skip("unknown_op")]),
    Case("a string in the list", '{"operations": [{"op": "archive", "id": 2}, "also remember the dog"]}',
         [archive(2), skip("malformed")]),
    Case("replace without an id", '[{"op": "replace", "value": "lives in Porto"}]', [skip("malformed")]),
    Case("replace with a word for an id", '[{"op": "replace", "id": "home_city", "value": "lives in Porto"}]',
         [skip("malformed")]),
    Case("add without a value", '[{"op": "add", "category": "goal", "key": "k"}]', [skip("malformed")]),
    Case("a number as the value", '[{"op": "add", "category": "identity", "key": "age", "value": 34}]',
         [skip("malformed")]),
    # --- nothing to save ----------------------------------------------------------------------------
    Case("the literal", "Nothing to save.", NOTHING),
    Case("no full stop, lower case", "nothing to save", NOTHING),
    Case("bold markdown (Llama 3 8B)", "**Nothing to save.**", NOTHING),
    Case("with a reason", "Nothing to save. The messages are small talk and a one-off question.", NOTHING),
    Case("a sentence (Mistral 7B)", "After reviewing the messages, there is nothing new worth saving.", NOTHING),
    Case("no new facts", "No new durable facts to save.", NOTHING),
    Case("empty list", "[]", NOTHING),
    Case("empty operations", '```json\n{"operations": []}\n```', NOTHING),
    Case("quoted literal", '"Nothing to save."', NOTHING),
    # --- refused answers -------------------------------------------------------------------------------
    Case("prose only", "The user seems to like tea, which is nice.", UNPARSEABLE),
    Case("truncated JSON", '{"operations": [{"op": "add", "category": "identity", "key": "ci', UNPARSEABLE),
    Case("a list of plain facts", '["lives in Porto", "likes jazz"]', UNPARSEABLE),
    Case("empty answer", "", UNPARSEABLE),
]
