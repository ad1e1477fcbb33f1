"""Every answer of the corpus gives exactly the operations (or the refusal) it lists."""

import pytest

from memory.review_parse import UnparseableOutput, derived_key, parse_output, read_op
from memory.rows import MemoryRowError
from tests.memory.reviewer.corpus import CORPUS, DERIVED, NOTHING, SHOWN, UNPARSEABLE


def read(answer: str):
    operations = parse_output(answer)
    if operations is None:
        return NOTHING
    out = []
    for raw in operations:
        try:
            op = read_op(raw, SHOWN)
        except MemoryRowError as exc:
            out.append(("skip", exc.code))
            continue
        if op.op == "add":
            key = DERIVED if op.key == derived_key(op.category, op.value) and DERIVED else op.key
            out.append({"op": "add", "category": op.category, "key": key, "value": op.value,
                        "message_ids": op.message_ids})
        elif op.op == "replace":
            out.append({"op": "replace", "id": op.memory_id, "value": op.value, "category": op.category,
                        "message_ids": op.message_ids})
        else:
            out.append({"op": "archive", "id": op.memory_id, "message_ids": op.message_ids})
    return out


def test_the_corpus_covers_the_shapes_real_models_answer_in():
    assert len(CORPUS) >= 40
    assert len({case.name for case in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_an_answer_gives_exactly_its_operations(case):
    if case.expect == UNPARSEABLE:
        with pytest.raises(UnparseableOutput):
            parse_output(case.answer)
        return
    assert read(case.answer) == case.expect


def test_a_derived_key_is_stable_and_ignores_filler():
    key = derived_key("identity", "works as a marine biologist")
    assert key == derived_key("identity", "works as a marine biologist")
    assert key.startswith("works_as_a_marine_biologist_")
    assert derived_key("identity", "works as a marine biologist.")[-8:] == key[-8:]
    assert derived_key("interest", "works as a marine biologist") != key


def test_a_huge_answer_of_unclosed_brackets_is_refused():
    with pytest.raises(UnparseableOutput):
        parse_output("[{" * 200_000)
