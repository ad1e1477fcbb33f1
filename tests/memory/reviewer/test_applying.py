"""Applying a run's operations: one transaction, skipped operations counted, the trust gate, one generation step each,
and the rebuild of only the files they can change."""

import json

import pytest
from django.db import connection

from fermix_site import generations
from fermix_site.conf import conf
from memory import prompt_files
from memory.conversations import message_append
from memory.models import Memory, ReviewOperation, ReviewRun, ReviewState
from memory.prompt_files import prompt_files_rebuild
from memory.reviewer import review_conversation
from tests.memory.reviewer.conftest import CONV, moving_to_porto, review, say, sent_messages
from tests.memory_factories import fact
from tests.personas import ops

pytestmark = pytest.mark.django_db


def test_a_review_adds_facts_and_rebuilds_user_md(model):
    say("I moved to Lisbon last year")
    model.push(ops({"op": "add", "category": "identity", "key": "home_city", "value": "lives in Lisbon"}))
    result = review()
    assert result == {"conversation": "telegram:1:root", "status": "ok", "reason": "", "ops_added": 1,
                      "ops_replaced": 0, "ops_archived": 0, "ops_skipped": 0, "input_messages": 1,
                      "input_tokens": 7, "run_id": ReviewRun.objects.get().id, "skipped_by_code": {}}
    row = Memory.objects.get()
    assert (row.scope_type, row.scope_id, row.category, row.value) == ("owner", "default", "identity",
                                                                       "lives in Lisbon")
    assert (conf.memory_dir("main") / "USER.md").read_text() == "## Identity\n- lives in Lisbon\n"
    request = model.requests[0]
    assert request.body["messages"][0]["role"] == "system" and "Nothing to save." in request.body["messages"][0][
        "content"]
    assert [m["text"] for m in sent_messages(request)] == ["I moved to Lisbon last year"]
    run = ReviewRun.objects.get()
    assert run.status == "ok" and run.cursor_after == run.input_message_ids[-1]
    from providers.models import ModelCall
    assert ModelCall.objects.get().agent_tag == "memory_reviewer"


def test_replace_and_archive_by_id_latest_statement_wins(model):
    city = fact("home_city", "lives in Lisbon", "identity")
    pet = fact("pet", "has a dog", "identity")
    say("We moved to Porto, and sadly the dog died")
    model.push(ops({"op": "replace", "id": city.id, "value": "lives in Porto"},
                   {"op": "archive", "id": pet.id, "reason": "the dog died"}))
    result = review()
    assert (result["ops_replaced"], result["ops_archived"]) == (1, 1)
    assert Memory.objects.get(pk=city.id).value == "lives in Porto"
    assert Memory.objects.get(pk=pet.id).archive_reason == "the dog died"
    state = json.loads(model.requests[0].body["messages"][1]["content"].split("\n", 1)[1])
    assert {r["id"] for r in state["memory_rows"]} == {city.id, pet.id}
    assert set(state["prompt_file_usage"]) == {"USER.md", "MEMORY.md"}


def test_malformed_and_foreign_operations_are_skipped_and_counted(model):
    other = fact("city", "lives in Oslo", "identity", owner="bo")
    say("I am vegetarian")
    model.push(ops(
        {"op": "add", "category": "preference", "key": "diet", "value": "is vegetarian"},
        {"op": "explode", "id": 1},
        "not an object",
        {"op": "add", "category": "mood", "key": "k", "value": "v"},
        {"op": "add", "category": "goal", "key": "k"},
        {"op": "replace", "id": other.id, "value": "lives in Bergen"},
        {"op": "archive", "id": 99999},
        {"op": "add", "category": "goal", "key": "long", "value": "x" * 201},
    ))
    result = review()
    assert (result["status"], result["ops_added"], result["ops_skipped"]) == ("ok", 1, 7)
    reasons = list(ReviewOperation.objects.filter(status="skipped").order_by("index").values_list("reason", flat=True))
    assert [r.split(":")[0] for r in reasons] == ["unknown_op", "malformed", "invalid_category", "malformed",
                                                  "out_of_scope", "not_found", "value_too_long"]
    assert Memory.objects.get(pk=other.id).value == "lives in Oslo"


def _inject_failure_on(value):
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("CREATE TRIGGER inject_failure BEFORE INSERT ON memory_events "
                           f"WHEN NEW.after_value = '{value}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END")
        else:
            cursor.execute("CREATE FUNCTION inject_failure() RETURNS trigger AS $$ BEGIN "
                           f"IF NEW.after_value = '{value}' THEN RAISE EXCEPTION 'injected failure'; END IF; "
                           "RETURN NEW; END $$ LANGUAGE plpgsql")
            cursor.execute("CREATE TRIGGER inject_failure BEFORE INSERT ON memory_events "
                           "FOR EACH ROW EXECUTE FUNCTION inject_failure()")


def test_a_failure_mid_batch_applies_nothing_and_keeps_the_cursor(model):
    city = fact("home_city", "lives in Lisbon", "identity")
    say("Moved to Porto; I like tea; I run")
    _inject_failure_on("likes tea")
    model.push(ops({"op": "replace", "id": city.id, "value": "lives in Porto"},
                   {"op": "add", "category": "preference", "key": "tea", "value": "likes tea"},
                   {"op": "add", "category": "interest", "key": "run", "value": "runs"}))
    result = review()
    assert result["status"] == "failed" and "injected failure" in result["reason"]
    assert Memory.objects.get(pk=city.id).value == "lives in Lisbon"
    assert Memory.objects.count() == 1
    state = ReviewState.objects.get()
    assert (state.cursor_message_id, state.failure_count, state.claimed_by) == (0, 1, "")
    assert ReviewOperation.objects.count() == 0


def test_a_reviewers_directive_needs_operator_trust(model):
    """Guest messages never reach the model; were a run's input guest-trusted, its directives are refused."""
    from django.utils import timezone as tz

    from memory.admission import Writer
    from memory.conversations import ConversationKey
    from memory.models import MemorySource
    from memory.review_ops import Batch, apply_operations

    source = MemorySource.objects.create(agent_id="main", source_type="conversation", key="conversation:t")
    proposed = [{"op": "add", "category": "directive", "key": "rule", "value": "always answer in French"},
                {"op": "add", "category": "preference", "key": "lang", "value": "likes French"}]
    # The second run re-proposes the preference the first stored: skipped as unchanged.
    for trust, expected in (("guest", (1, 1)), ("operator", (1, 1))):
        run = ReviewRun.objects.create(agent_id="main", conversation_key="telegram:1:root", owner_id="default",
                                       trigger="now", started_at=tz.now())
        writer = Writer(kind="reviewer", agent_id="main", owner_id="default", trust=trust,
                        conversation=ConversationKey.parse(CONV), actor_id=f"run:{run.id}")
        applied = apply_operations(run, writer, proposed, source, Batch(frozenset()))
        assert (applied.added, applied.skipped) == expected
    reasons = sorted(ReviewOperation.objects.filter(status="skipped").values_list("reason", flat=True))
    assert [r.split(":")[0] for r in reasons] == ["trust_gate", "unchanged"]
    assert Memory.objects.get(key="rule").category == "directive"  # from the operator-trust run


def test_each_applied_operation_moves_the_memories_generation_once(model):
    """The rebuild's reuse of the model's renders counts on it: one generation step per applied operation."""
    moving_to_porto(model, {"op": "add", "category": "interest", "key": "music", "value": "loves jazz"},
                    {"op": "archive", "id": 99999})
    before = generations.current(["memories:main"])[0]
    result = review()
    assert (result["ops_replaced"], result["ops_archived"], result["ops_added"], result["ops_skipped"]) == (1, 1, 1, 2)
    assert generations.current(["memories:main"])[0] == before + 3


def _file_state():
    """Each prompt file's text and its revision numbers."""
    from resources.models import ResourceRevision

    folder = conf.memory_dir("main")
    revisions = {t: list(ResourceRevision.objects.filter(resource_type=t).order_by("revision")
                         .values_list("revision", flat=True)) for t in ("user_md", "memory_md")}
    return {name: (folder / name).read_text() for name in ("USER.md", "MEMORY.md")}, revisions


def _rendered_owner_files():
    fact("city", "lives in Lisbon", "identity")
    fact("proj", "works on the Fermix memory service", "context")
    prompt_files_rebuild(agent_id="main", trigger="test")
    message_append(agent_id="main", conversation="slack:9", role="user", content="I love jazz; I play in a band",
                   trust="operator", owner_id="bo")
    return _file_state()


def test_a_review_writing_only_rows_the_files_do_not_render_leaves_them_and_their_revisions_alone(model):
    """Another owner's rows render in neither file: no new revision, and the files hold what a rebuild
    from the rows gives."""
    before = _rendered_owner_files()
    model.push(ops({"op": "add", "category": "interest", "key": "music", "value": "loves jazz"},
                   {"op": "add", "category": "context", "key": "band", "value": "plays in a band"}))
    renders_before = prompt_files._render_cache.misses
    result = review_conversation(agent_id="main", conversation="slack:9", force=True)
    assert (result["status"], result["ops_added"]) == ("ok", 2)
    # The files were not rendered again: the model was shown the renders the setup's rebuild cached,
    # and the review's own writes could not change them, so its rebuild reused them.
    assert prompt_files._render_cache.misses == renders_before
    assert Memory.objects.filter(owner_id="bo").count() == 2
    assert _file_state() == before


def test_a_review_writing_rows_a_file_renders_writes_a_new_revision_of_that_file_only(model):
    before = _rendered_owner_files()
    say("I love jazz")
    model.push(ops({"op": "add", "category": "interest", "key": "music", "value": "loves jazz"}))
    assert review()["ops_added"] == 1
    (files, revisions) = _file_state()
    assert files["USER.md"] == "## Identity\n- lives in Lisbon\n\n## Interests\n- loves jazz\n"
    assert revisions["user_md"] == before[1]["user_md"] + [before[1]["user_md"][-1] + 1]
    assert (files["MEMORY.md"], revisions["memory_md"]) == (before[0]["MEMORY.md"], before[1]["memory_md"])


def test_a_row_written_by_someone_else_during_the_model_call_still_reaches_the_files(model, monkeypatch):
    """The rebuild reuses the renders made for the model only when no other write came in between."""
    from memory import reviewer

    _rendered_owner_files()
    chat = reviewer.chat

    def chat_while_someone_writes(**kwargs):
        fact("rule", "answer in Portuguese", "directive", minute=5)
        fact("name", "is called Ana", "identity", minute=5)
        return chat(**kwargs)

    monkeypatch.setattr(reviewer, "chat", chat_while_someone_writes)
    model.push(ops({"op": "add", "category": "interest", "key": "music", "value": "loves jazz"}))
    assert review_conversation(agent_id="main", conversation="slack:9", force=True)["ops_added"] == 1
    files, _ = _file_state()
    assert files["USER.md"] == "## Identity\n- is called Ana\n- lives in Lisbon\n"
    assert files["MEMORY.md"] == ("## Working Rules\n- answer in Portuguese\n\n"
                                  "## Context\n- works on the Fermix memory service\n")


def test_files_rendering_follows_the_owner_and_the_scope_rules(home):
    from memory.prompt_files import files_rendering

    assert files_rendering(Memory(owner_id="default", scope_type="owner", category="identity")) == {"user_md"}
    assert files_rendering(Memory(owner_id="default", scope_type="agent", category="context")) == {"memory_md"}
    assert files_rendering(Memory(owner_id="default", scope_type="owner", category="context"),
                           "identity") == {"user_md", "memory_md"}
    assert files_rendering(Memory(owner_id="bo", scope_type="owner", category="identity")) == set()
    assert files_rendering(Memory(owner_id="default", scope_type="agent", category="identity")) == set()
    assert files_rendering(Memory(owner_id="default", scope_type="conversation", category="directive")) == set()
    assert files_rendering(Memory(owner_id="default", scope_type="job", category="context")) == set()
    assert files_rendering(Memory(owner_id="default", scope_type="owner", category="")) == set()
