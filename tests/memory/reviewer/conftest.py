"""What the reviewer's tests share: the conversation under review, the owner speaking in it, a forced
review, and what the model was sent."""

import json
from functools import partial

from memory.reviewer import review_conversation
from tests import personas
from tests.memory_factories import fact
from tests.personas import ops

CONV = "telegram:1"

say = partial(personas.say, conversation=CONV)


def review(**kwargs):
    kwargs.setdefault("force", True)
    return review_conversation(agent_id="main", conversation=CONV, **kwargs)


def sent_messages(request):
    return json.loads(request.body["messages"][1]["content"].split("\n", 1)[1])["user_messages"]


def moving_to_porto(model, *more_ops):
    """Ana moved to Porto, gave up her dog and loves jazz: the model replaces, archives and adds."""
    city = fact("home_city", "lives in Lisbon", "identity")
    pet = fact("pet", "has a dog", "identity")
    say("Porto now, no dog, and I love jazz")
    model.push(ops({"op": "replace", "id": city.id, "value": "lives in Porto"},
                   {"op": "archive", "id": pet.id},
                   {"op": "add", "category": "interest", "key": "music", "value": "loves jazz"}, *more_ops))
    return city, pet
