"""Values are declarative facts about the user or their work, enforced by admission for the reviewer's
writes: questions, the assistant's refusals and one-shot answers, self-instructions, instructions outside
`directive` and values that say nothing are refused, each with its code."""

import pytest

from memory.admission import AdmissionError, Writer, check_value
from memory.models import Memory, ReviewOperation
from tests.memory.reviewer.conftest import review, say
from tests.memory_factories import fact
from tests.personas import ops

pytestmark = pytest.mark.django_db

REVIEWER = Writer(kind="reviewer", agent_id="main", owner_id="default", trust="operator")

REFUSED = [
    ("preference", "what is the best book for the weekend?", "question"),
    ("context", "asked: should I learn Rust or Go?", "question"),
    ("context", "How do I reset my router", "question"),
    ("context", "Can you recommend a restaurant in Porto", "question"),
    ("context", "I'm sorry, I can't help with that request", "assistant_refusal"),
    ("directive", "I cannot share personal information", "assistant_refusal"),
    ("context", "As an AI, I do not have opinions", "assistant_refusal"),
    ("context", "the assistant refused to give medical advice", "assistant_refusal"),
    ("context", "Here is a recipe for pancakes: flour, eggs, milk", "assistant_answer"),
    ("directive", "Sure! The capital of Australia is Canberra", "assistant_answer"),
    ("context", "the assistant recommended reading Dune", "assistant_answer"),
    ("context", "remember that you promised to send the summary", "self_instruction"),
    ("directive", "You must always answer in Portuguese", "self_instruction"),
    ("identity", "Remember to call the user Ana", "self_instruction"),
    ("preference", "always answer in Portuguese", "instruction_not_directive"),
    ("context", "use metric units in every answer", "instruction_not_directive"),
    ("identity", "call me Ana", "instruction_not_directive"),
    ("preference", "Please keep answers short", "instruction_not_directive"),
    ("preference", "keep answers short", "instruction_not_directive"),
    ("interest", "likes stuff", "says_nothing"),
    ("preference", "likes things", "says_nothing"),
    ("identity", "is nice", "says_nothing"),
    ("context", "ok", "says_nothing"),
]
ACCEPTED = [
    ("identity", "works as a marine biologist"),
    ("identity", "is vegetarian"),
    ("interest", "loves jazz"),
    ("preference", "prefers metric units"),
    ("preference", "always drinks tea in the morning"),
    ("preference", "never drinks coffee after noon"),
    ("context", "keeps bees on the roof"),
    ("context", "is writing a thesis on coral reefs"),
    ("goal", "wants to learn how to sail"),
    ("directive", "always answer in Portuguese"),
    ("directive", "use metric units"),
    ("identity", "is called Ana"),
    ("context", "asks for code examples in Python"),
    ("interest", "reads science fiction"),
]


@pytest.mark.parametrize(("category", "value", "code"), REFUSED, ids=[r[1] for r in REFUSED])
def test_a_value_that_is_not_a_fact_is_refused_with_its_reason(category, value, code):
    with pytest.raises(AdmissionError) as refused:
        check_value(REVIEWER, category, value)
    assert refused.value.code == code


@pytest.mark.parametrize(("category", "value"), ACCEPTED, ids=[a[1] for a in ACCEPTED])
def test_a_declarative_fact_is_admitted(category, value):
    check_value(REVIEWER, category, value)


def test_only_the_reviewers_values_are_screened():
    for kind in ("tool", "operator", "job"):
        check_value(Writer(kind=kind, agent_id="main", owner_id="default", trust="operator"), "context", "likes stuff")


def test_a_review_skips_each_refused_value_with_its_code(model):
    city = fact("home_city", "lives in Lisbon", "identity")
    say("Can you recommend a book? Also I love jazz")
    model.push(ops(
        {"op": "add", "category": "context", "key": "book", "value": "Can you recommend a book?"},
        {"op": "add", "category": "directive", "key": "refusal", "value": "I'm sorry, I can't recommend books"},
        {"op": "add", "category": "context", "key": "answer", "value": "Here are three books: Dune, Emma, Ulysses"},
        {"op": "add", "category": "context", "key": "self", "value": "remember that you recommended Dune"},
        {"op": "add", "category": "preference", "key": "rule", "value": "always answer with a book list"},
        {"op": "add", "category": "interest", "key": "stuff", "value": "likes stuff"},
        {"op": "replace", "id": city.id, "value": "what city does the user live in?"},
        {"op": "add", "category": "interest", "key": "music", "value": "loves jazz"},
    ))
    result = review()
    assert (result["ops_added"], result["ops_skipped"]) == (1, 7)
    codes = list(ReviewOperation.objects.filter(status="skipped").order_by("index").values_list("code", flat=True))
    assert codes == ["question", "assistant_refusal", "assistant_answer", "self_instruction",
                     "instruction_not_directive", "says_nothing", "question"]
    assert set(Memory.objects.values_list("value", flat=True)) == {"lives in Lisbon", "loves jazz"}
