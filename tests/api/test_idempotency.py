"""`Idempotency-Key` on message appends and turns (CONTRACT §8): a retry stores nothing twice."""

import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from api import idempotency
from api.models import ApiKey, IdempotencyRecord
from memory.models import Message
from tests.fakeprovider import Reply, error
from tests.personas import BASE, Caller, error_of

pytestmark = pytest.mark.django_db


def stored(role="user"):
    return list(Message.objects.filter(role=role).values_list("content", flat=True))


def test_it_replays_the_first_answer_to_a_retry_and_stores_nothing(home, bot):
    first = bot.say("hello", "k-1", sender="ana")
    again = bot.say("hello", "k-1", sender="ana")
    assert first.status_code == 201 and "Idempotent-Replay" not in first.headers
    assert again.status_code == 200 and again.headers["Idempotent-Replay"] == "true"
    assert again.json() == first.json()
    assert stored() == ["hello"]


def test_it_replays_the_same_request_however_the_body_is_written(home, bot):
    first = bot.say("hello", "k-1", conversation="telegram:42")
    again = bot.post("/agents/main/conversations/telegram:42:root/messages",
                     {"content": "hello", "trust": "guest", "role": "user"}, "k-1")
    assert (again.status_code, again.json()) == (200, first.json())
    assert stored() == ["hello"]


def test_the_same_key_with_another_body_is_a_conflict_and_stores_nothing(home, bot):
    bot.say("hello", "k-1")
    assert error_of(bot.say("goodbye", "k-1")) == (409, "idempotency_conflict")
    assert stored() == ["hello"]


def test_a_key_counts_only_for_its_api_key_and_endpoint(home, client, keys, bot):
    operator = Caller(client, keys["operator"])
    assert bot.say("hello", "k-1").status_code == 201
    assert operator.say("hello", "k-1").status_code == 201
    assert bot.say("hello", "k-1", conversation="telegram:43").status_code == 201
    assert bot.say("hello", "k-2").status_code == 201
    assert stored() == ["hello"] * 4


def test_requests_without_the_header_are_never_deduplicated(home, bot):
    assert [bot.say("hello").status_code for _ in range(2)] == [201, 201]
    assert stored() == ["hello", "hello"] and not IdempotencyRecord.objects.exists()


@pytest.mark.parametrize("key", ["", "   ", "k" * 201])
def test_an_empty_or_over_long_key_is_a_400_and_stores_nothing(home, bot, key):
    assert error_of(bot.say("hello", key)) == (400, "invalid_idempotency_key")
    assert stored() == []


def test_a_key_of_200_characters_of_any_kind_is_accepted(home, bot):
    key = ("é ✓-" * 50)[:200]
    assert bot.say("hello", key).status_code == 201
    assert bot.say("hello", key).status_code == 200


def test_a_key_no_longer_counts_after_24_hours(home, bot):
    first = bot.say("hello", "k-1").json()
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=24, seconds=1))
    again = bot.say("hello", "k-1")
    assert again.status_code == 201 and again.json()["id"] != first["id"]
    assert stored() == ["hello", "hello"]
    assert bot.say("hello", "k-1").json() == again.json()


def test_the_prune_deletes_only_records_older_than_24_hours(home, bot):
    bot.say("old", "k-old")
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=25))
    bot.say("new", "k-new")
    assert idempotency.records_prune() == 1
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["k-new"]


def _refuse_records():
    """A database that refuses every idempotency record (a trigger), as a full or failing disk would."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("CREATE TRIGGER refuse_record BEFORE INSERT ON api_idempotency_records "
                           "BEGIN SELECT RAISE(ABORT, 'injected failure'); END")
        else:
            cursor.execute("CREATE FUNCTION refuse_record() RETURNS trigger AS $$ BEGIN "
                           "RAISE EXCEPTION 'injected failure'; END $$ LANGUAGE plpgsql")
            cursor.execute("CREATE TRIGGER refuse_record BEFORE INSERT ON api_idempotency_records "
                           "FOR EACH ROW EXECUTE FUNCTION refuse_record()")


def test_a_record_is_written_in_the_transaction_of_its_message(home, bot):
    _refuse_records()
    assert bot.say("hello", "k-1").status_code == 500
    assert stored() == [] and not IdempotencyRecord.objects.exists()
    assert bot.say("hello").status_code == 201


def _in_threads(count, target):
    barrier, answers = threading.Barrier(count), []

    def run():
        barrier.wait()
        try:
            answers.append(target())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return answers


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_store_one_message(home, client, keys):
    bot = Caller(client, keys["channel"])
    answers = _in_threads(6, lambda: bot.say("hello", "k-1"))
    assert sorted(a.status_code for a in answers) == [200] * 5 + [201]
    assert len({a.json()["id"] for a in answers}) == 1
    assert stored() == ["hello"]


# --- turns ------------------------------------------------------------------------------------------


def test_a_retried_turn_replays_its_answer_without_asking_the_model_again(script, bot):
    script.push("turn", Reply(text="Hi Ana."))
    first = bot.turn("hi", "t-1", trust="guest")
    again = bot.turn("hi", "t-1", trust="guest")
    assert first.status_code == 200 and "Idempotent-Replay" not in first.headers
    assert again.status_code == 200 and again.headers["Idempotent-Replay"] == "true"
    assert again.json() == first.json() and first.json()["reply"] == "Hi Ana."
    assert len(script.requests("turn")) == 1
    assert (stored("user"), stored("assistant")) == (["hi"], ["Hi Ana."])


def test_a_turn_key_used_with_another_body_is_a_conflict(script, bot):
    bot.turn("hi", "t-1")
    assert error_of(bot.turn("hello", "t-1")) == (409, "idempotency_conflict")
    assert stored("user") == ["hi"] and len(script.requests("turn")) == 1


def test_a_failed_turn_retried_with_its_key_answers_without_storing_the_message_twice(script, bot):
    script.push("turn", error(500))
    assert error_of(bot.turn("hi", "t-1")) == (502, "provider_error")
    assert IdempotencyRecord.objects.get().state == "failed"
    script.push("turn", Reply(text="Back again."))
    resumed = bot.turn("hi", "t-1")
    assert resumed.status_code == 200 and "Idempotent-Replay" not in resumed.headers
    assert resumed.json()["reply"] == "Back again."
    assert (stored("user"), stored("assistant")) == (["hi"], ["Back again."])
    assert bot.turn("hi", "t-1").json() == resumed.json()


@pytest.mark.django_db(transaction=True)
def test_a_retry_while_the_turn_runs_is_told_it_is_in_progress_then_gets_the_answer(script, client, keys):
    bot = Caller(client, keys["channel"])
    script.push("turn", Reply(text="Slow answer.", delay=2))
    first = []
    runner = threading.Thread(target=lambda: (first.append(bot.turn("hi", "t-1")), connection.close()))
    runner.start()
    _wait_for(lambda: IdempotencyRecord.objects.filter(state="running").exists())
    assert error_of(bot.turn("hi", "t-1")) == (409, "idempotency_in_progress")
    runner.join(timeout=30)
    replay = bot.turn("hi", "t-1")
    assert replay.headers["Idempotent-Replay"] == "true" and replay.json() == first[0].json()
    assert (stored("user"), stored("assistant")) == (["hi"], ["Slow answer."])


def _wait_for(condition, timeout=10):
    deadline = timezone.now() + timedelta(seconds=timeout)
    while not condition():
        assert timezone.now() < deadline, "the condition did not become true"
        threading.Event().wait(0.05)


def _stranded_turn(bot, script, claimed_by: str, claimed_at=None):
    """A turn whose attempt stored its user message and then never finished."""
    script.push("turn", error(500))
    bot.turn("hi", "t-1")
    IdempotencyRecord.objects.update(state="running", claimed_by=claimed_by,
                                     claimed_at=claimed_at or timezone.now())


def _dead_process_claim() -> str:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    started = idempotency._start_time(child.pid)
    child.wait()
    host, boot = idempotency._this_process().split(" ")[:2]
    return f"{host} {boot} {child.pid} {started} deadbeef"


def test_a_turn_whose_process_died_is_resumed_by_its_retry(script, bot):
    _stranded_turn(bot, script, _dead_process_claim())
    script.push("turn", Reply(text="Resumed."))
    resumed = bot.turn("hi", "t-1")
    assert resumed.status_code == 200 and resumed.json()["reply"] == "Resumed."
    assert (stored("user"), stored("assistant")) == (["hi"], ["Resumed."])


def test_a_turn_claimed_by_a_running_process_elsewhere_waits_for_its_lease(script, bot):
    elsewhere = "other-node - 1234 - cafe"
    _stranded_turn(bot, script, elsewhere)
    assert error_of(bot.turn("hi", "t-1")) == (409, "idempotency_in_progress")
    IdempotencyRecord.objects.update(claimed_at=timezone.now() - idempotency.TURN_LEASE - timedelta(seconds=1))
    script.push("turn", Reply(text="After the lease."))
    assert bot.turn("hi", "t-1").json()["reply"] == "After the lease."
    assert (stored("user"), stored("assistant")) == (["hi"], ["After the lease."])


def test_an_attempt_that_lost_its_claim_stores_no_reply(script, bot):
    once = idempotency.Keyed(api_key_id=ApiKey.objects.get(name="bot").pk, endpoint="POST /turns", key="t-1",
                             request_hash="h")
    slow = idempotency.TurnClaim(once, None)
    slow.hold(Message.objects.create(agent_id="main", channel="telegram", chat_id="42", content="hi",
                                     created_at=timezone.now()))
    IdempotencyRecord.objects.update(claimed_at=timezone.now() - idempotency.TURN_LEASE - timedelta(seconds=1))
    retry = idempotency.TurnClaim(once, IdempotencyRecord.objects.get())
    assert retry.resumed
    with pytest.raises(idempotency.ApiError) as refused:
        slow.finish({"reply": "too late"})
    assert refused.value.code == "idempotency_in_progress"
    retry.finish({"reply": "in time"})
    assert IdempotencyRecord.objects.get().response == {"reply": "in time"}


def test_the_header_is_documented_on_both_operations(home, client):
    paths = client.get(BASE + "/openapi.json").json()["paths"]
    for action in ("messages", "turns"):
        operation = paths[f"/api/v1/agents/{{agent}}/conversations/{{conv}}/{action}"]["post"]
        header = next(p for p in operation["parameters"] if p["name"] == "Idempotency-Key")
        assert header["in"] == "header" and not header["required"]
        assert (header["schema"]["minLength"], header["schema"]["maxLength"]) == (1, 200)
        assert "Idempotent-Replay" in operation["responses"]["200"]["headers"]
