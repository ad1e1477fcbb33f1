"""A second real process for cache tests: reads JSON commands on stdin, answers one JSON line each."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fermix_site.settings")

import django  # noqa: E402

django.setup()

from memory import conversations, rows  # noqa: E402


def window(args):
    return [m.content for m in conversations.window_read(agent_id=args["agent"], conversation=args["conversation"])]


def append(args):
    conversations.message_append(agent_id=args["agent"], conversation=args["conversation"], role="user",
                                 content=args["content"])
    return "ok"


def clear(args):
    return conversations.window_clear(agent_id=args["agent"], conversation=args["conversation"])


def lookup(args):
    row = rows.memory_lookup(agent_id=args["agent"], owner_id=args["owner"], scope_type="owner",
                             scope_id=args["owner"], key=args["key"])
    return row.value if row else None


def archive(args):
    rows.memory_archive(memory_id=args["id"], archived_by="probe", reason="from another process")
    return "ok"


def upsert(args):
    row, action = rows.memory_upsert(agent_id=args["agent"], owner_id=args["owner"], scope_type="owner",
                                     scope_id=args["owner"], key=args["key"], value=args["value"],
                                     category="preference", actor_type="operator")
    return action


COMMANDS = {f.__name__: f for f in (window, append, clear, lookup, archive, upsert)}

for line in sys.stdin:
    request = json.loads(line)
    answer = COMMANDS[request["do"]](request)
    sys.stdout.write(json.dumps({"answer": answer}) + "\n")
    sys.stdout.flush()
